"""What a Storm cluster is: its ports, paths, pids, logs and Nimbus's view of it.

:class:`StormClusterView` answers questions about a started (or attached)
cluster without changing it; its subclass
:class:`~storm_bridge.apache.daemons.ApacheStormCluster` starts, restarts and
stops the daemons. Pids count only while ``/proc/<pid>/cmdline`` proves they are
this cluster's (see :mod:`storm_bridge.apache.discovery`).
"""

from __future__ import annotations

from pathlib import Path

from storm_bridge.apache.daemon_jvms import (
    LOG_TAIL_LINES,
    DaemonJvms,
    StormClusterError,
)
from storm_bridge.apache.discovery import is_nimbus, is_supervisor, worker_pids
from storm_bridge.apache.nimbus import ClusterSummary, NimbusClient
from storm_bridge.apache.state import StormClusterInfo, SupervisorInfo

__all__ = ["StormClusterView"]


class StormClusterView:
    """The read side of an :class:`~storm_bridge.apache.daemons.ApacheStormCluster`.

    The subclass sets ``root`` (the cluster's root dir), ``_info`` (None until
    started or attached) and ``_jvms`` (its daemons' JVMs).
    """

    root: Path
    _info: StormClusterInfo | None
    _jvms: DaemonJvms

    @property
    def info(self) -> StormClusterInfo:
        """Ports, pids and paths of the started cluster.

        Raises:
            StormClusterError: not started.
        """
        if self._info is None:
            msg = f"{self!r} is not started; call start() first"
            raise StormClusterError(msg)
        return self._info

    @property
    def nimbus(self) -> str:
        """Nimbus's Thrift address, ``127.0.0.1:PORT``."""
        return self.info.nimbus

    @property
    def conf_file(self) -> Path:
        """The cluster's ``storm.yaml``."""
        return self.root / "conf" / "storm.yaml"

    @property
    def log_dir(self) -> Path:
        """``storm.log.dir``: daemon logs and ``workers-artifacts/``."""
        return self.root / "logs"

    def client(self, timeout_s: float = 5.0) -> NimbusClient:
        """Return a Thrift client of this cluster's Nimbus."""
        info = self.info
        return NimbusClient(info.nimbus_host, info.nimbus_port, timeout_s=timeout_s)

    def summary(self) -> ClusterSummary:
        """Return Nimbus's cluster summary.

        Raises:
            NimbusUnreachableError: Nimbus did not answer.
        """
        return self.client().cluster_summary()

    @property
    def nimbus_pid(self) -> int | None:
        """The Nimbus JVM's pid while it runs, else None."""
        pid = self._info.nimbus_pid if self._info else None
        return pid if pid is not None and is_nimbus(pid, self.conf_file) else None

    def supervisor(self, index: int) -> SupervisorInfo:
        """Return supervisor ``index`` (1-based).

        Raises:
            StormClusterError: no such supervisor.
        """
        for sup in self.info.supervisors:
            if sup.index == index:
                return sup
        known = ", ".join(s.name for s in self.info.supervisors) or "none"
        msg = f"no supervisor-{index} in the Storm cluster at {self.root} ({known})"
        raise StormClusterError(msg)

    def supervisor_pid(self, index: int) -> int | None:
        """Supervisor ``index``'s JVM pid while it runs, else None."""
        sup = self.supervisor(index)
        return sup.pid if sup.pid is not None and is_supervisor(sup) else None

    def worker_pids(self, index: int | None = None) -> list[int]:
        """Return the worker JVMs of supervisor ``index`` (None: of every one).

        A worker is an ``org.apache.storm.daemon.worker.Worker`` JVM whose
        ``-Dstorm.local.dir`` is its supervisor's, found in ``/proc``; each
        has a LogWriter JVM as its parent, not counted here.
        """
        if self._info is None:
            return []
        sups = self._info.supervisors if index is None else (self.supervisor(index),)
        return worker_pids(sups)

    def log_path(self, name: str) -> Path:
        """Return the log4j log of ``nimbus`` or ``supervisor-<i>``."""
        return self._jvms.log_path(name)

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        """Return the tails of a daemon's stdout/stderr and of its log.

        Java stack frames are left out, so the tail shows the errors themselves.
        """
        return self._jvms.log_tail(name, lines)
