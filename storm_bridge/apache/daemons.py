"""A real Apache Storm cluster (Nimbus and N supervisors) on 127.0.0.1, from Maven jars.

Nimbus and supervisors run ``org.apache.storm.daemon.*`` main classes directly
(see :mod:`storm_bridge.apache.launcher`, and :mod:`storm_bridge.apache.layout`
for the cluster's root dir); supervisors launch worker JVMs themselves, as
Storm's supervisors do. Readiness is Nimbus's own answer over Thrift (a
leader, then every supervisor registered), never a sleep. A cluster started
``detached`` (``sr3 lab up --storm``) outlives this process;
:meth:`ApacheStormCluster.attach` rebuilds it from ``cluster.json``. Pids are
only signalled after ``/proc/<pid>/cmdline`` proves they are this cluster's
(see :mod:`storm_bridge.apache.discovery`). This module starts, restarts and
stops the daemons; what the cluster is (ports, paths, pids, logs) is answered
by its base class in :mod:`storm_bridge.apache.cluster_view`.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from storm_bridge.apache.cluster_view import StormClusterView
from storm_bridge.apache.daemon_jvms import DaemonJvms, DaemonStart, StormClusterError
from storm_bridge.apache.discovery import cluster_processes, is_supervisor
from storm_bridge.apache.home import StormHome, java_binary
from storm_bridge.apache.layout import (
    DEFAULT_NIMBUS_PORT,
    STATE_FILE,
    load_info,
    place,
    plan_cluster,
    save_info,
    write_conf,
)
from storm_bridge.apache.nimbus import ClusterSummary
from storm_bridge.apache.state import DaemonHost, StormClusterInfo
from storm_bridge.apache.status import cluster_status, wait_supervisors

__all__ = [
    "DEFAULT_NIMBUS_PORT",
    "ApacheStormCluster",
    "StormClusterError",
]

logger = logging.getLogger(__name__)


class ApacheStormCluster(StormClusterView):
    """Nimbus and ``supervisors`` supervisors on 127.0.0.1, as JVMs of Storm's jars.

    Args:
        root: Holds ``cluster.json``, ``conf/``, ``logs/`` and ``local/``.
            Created if missing.
        zk_hosts: The ZooKeeper the cluster uses (``127.0.0.1:PORT``).
        zk_root: Storm's znode root (``storm.zookeeper.root``).
        supervisors: How many supervisors (default 1).
        slots: Worker slots per supervisor (default 2).
        nimbus_port: Nimbus's Thrift port: None takes 6627 when free, else a
            free port (logged); 0 a free port; any other must be free.
        heap_mb: ``-Xmx`` of Nimbus and each supervisor.
        worker_heap_mb: ``-Xmx`` of each worker JVM (``worker.childopts``).
        conf: More ``storm.yaml`` entries, written last (so they win): e.g.
            ``sr3.zk.hosts`` and ``sr3.node.secret``, which every topology's
            components then see in their Storm conf.
        env: Extra environment of the daemons, inherited by workers and their
            Python subprocesses.
        java_home: A JDK for the daemons and workers (default: ``JAVA_HOME``
            or ``java`` on PATH).
        home: The fetched STORM_HOME (default :meth:`StormHome.locate`).
        detached: Start the JVMs in their own session so they outlive this
            process (stop them later with ``attach(root).stop()``).
        start_timeout_s: How long :meth:`start` waits for Nimbus to lead and
            every supervisor to register (default 120 s: two cores shared).
        stop_timeout_s: Grace between SIGTERM and SIGKILL (default 10 s).
        hosts: Where ``nimbus`` and ``supervisor-<i>`` run, by daemon name
            (default: all on 127.0.0.1); the lab's netns hosts set it.
        launch_through: Given a daemon's
            :class:`~storm_bridge.apache.daemon_jvms.DaemonStart`, returns the
            command to start instead of its command line, one that execs it
            (the netns lab: the wrapper ``vagrant/provision/storm.sh`` writes,
            :mod:`sr3_cli.lab_storm`). Default: the command line itself.
    """

    def __init__(  # noqa: PLR0913 (keyword-only options)
        self,
        root: Path,
        *,
        zk_hosts: str,
        zk_root: str = "/storm",
        supervisors: int = 1,
        slots: int = 2,
        nimbus_port: int | None = None,
        heap_mb: int = 256,
        worker_heap_mb: int = 384,
        conf: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        java_home: str | None = None,
        home: StormHome | None = None,
        detached: bool = False,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 10.0,
        hosts: Mapping[str, DaemonHost] | None = None,
        launch_through: Callable[[DaemonStart], list[str]] | None = None,
    ) -> None:
        if supervisors < 1 or slots < 1:
            msg = (
                "a Storm cluster needs at least 1 supervisor and 1 slot, got "
                f"supervisors={supervisors}, slots={slots}"
            )
            raise ValueError(msg)
        self.root = Path(root).resolve()
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.supervisor_count = supervisors
        self.slots = slots
        self.nimbus_port = nimbus_port
        self.heap_mb = heap_mb
        self.worker_heap_mb = worker_heap_mb
        self.conf = dict(conf or {})
        self.env = dict(env or {})
        self.java_home = java_home
        self._home = home
        self.detached = detached
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.hosts = dict(hosts or {})
        self._info: StormClusterInfo | None = None
        self._jvms = DaemonJvms(
            root=self.root,
            conf_file=self.conf_file,
            log_dir=self.log_dir,
            heap_mb=heap_mb,
            env=self.env,
            java_home=java_home,
            detached=detached,
            start_timeout_s=start_timeout_s,
            launch_through=launch_through,
        )

    def __repr__(self) -> str:
        where = self._info.nimbus if self._info else "not started"
        return f"ApacheStormCluster({str(self.root)!r}, {where})"

    def status(self) -> dict[str, Any]:
        """Return a JSON-able summary: nimbus, UI, supervisors with slots, topologies.

        Never raises for an unreachable Nimbus: ``error`` then says why, and
        the process fields still tell what runs.
        """
        return cluster_status(self)

    # --- lifecycle -------------------------------------------------------------

    @classmethod
    def attach(
        cls,
        root: Path,
        *,
        env: Mapping[str, str] | None = None,
        launch_through: Callable[[DaemonStart], list[str]] | None = None,
    ) -> ApacheStormCluster:
        """Return the cluster described by ``root/cluster.json``.

        Its pids are trusted only while their command lines match, so a stale
        file (cluster gone, pids recycled) is harmless.

        Args:
            root: The cluster's root dir.
            env: Extra environment for supervisors it restarts (not recorded
                in cluster.json: it may hold a secret).
            launch_through: How it restarts them (see the class).

        Raises:
            StormClusterError: there is no readable ``cluster.json``.
        """
        info = load_info(Path(root))
        cluster = cls(
            Path(root),
            zk_hosts=info.zk_hosts,
            zk_root=info.zk_root,
            supervisors=max(1, len(info.supervisors)),
            nimbus_port=info.nimbus_port,
            home=StormHome(Path(info.storm_home), info.version),
            env=env,
            detached=True,
            launch_through=launch_through,
        )
        cluster._info = info
        return cluster

    def start(self) -> ApacheStormCluster:
        """Start Nimbus and the supervisors; return once all are known to Nimbus.

        Calling it on a running cluster does nothing.

        Raises:
            StormMissingError: Storm's jars are not fetched, or java is missing.
            StormClusterError: Nimbus's port is taken, or a daemon exited or
                was not ready in time (the message quotes its output).
        """
        if (
            self._info is not None
            and self.nimbus_pid is not None
            and all(self.supervisor_pid(s.index) for s in self._info.supervisors)
        ):
            return self
        self.stop()  # a half-started earlier attempt
        home = self._home or StormHome.locate()
        java = java_binary(self.java_home)
        self._info = info = plan_cluster(
            home, self.root, zk_hosts=self.zk_hosts, zk_root=self.zk_root,
            nimbus_port=self.nimbus_port, supervisors=self.supervisor_count,
            slots=self.slots,
        )  # fmt: skip
        self._info = info = place(info, self.hosts)
        sups = info.supervisors
        write_conf(info, root=self.root, log_dir=self.log_dir,
                   worker_heap_mb=self.worker_heap_mb, extra=self.conf)  # fmt: skip
        started = time.monotonic()
        try:
            pid = self._jvms.spawn(
                "nimbus", home, java, {}, launch_prefix=info.nimbus_launch_prefix
            )
            self._info = info = replace(info, nimbus_pid=pid)
            sups = tuple(
                replace(s, pid=self._jvms.spawn_supervisor(s, home, java)) for s in sups
            )
            self._info = info = replace(info, supervisors=sups)
            save_info(self.root, self.info)
            self._wait("nimbus", pid, "did not lead (no leader in getClusterInfo)",
                       lambda s: s.leader is not None)  # fmt: skip
            for sup in sups:  # each checked for an early exit while all register
                self._wait(sup.name, sup.pid or 0, "did not register with Nimbus",
                           lambda s: len(s.supervisors) >= len(sups))  # fmt: skip
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Apache Storm %s up: Nimbus %s, %d supervisor(s) x %d slots in %.1f s (%s)",
            info.version, info.nimbus, len(sups), self.slots,
            time.monotonic() - started, self.root,
        )  # fmt: skip
        return self

    def _wait(
        self, name: str, pid: int, what: str, ready: Callable[[ClusterSummary], bool]
    ) -> None:
        self._jvms.wait_ready(name, pid, what, ready, self.info, summary=self.summary)

    # --- failures and restarts -------------------------------------------------

    def kill_supervisor(self, index: int, sig: int = signal.SIGKILL) -> int | None:
        """Send ``sig`` to supervisor ``index``; return its pid (None: not running).

        Its workers keep running, as on a real cluster.
        """
        pid = self.supervisor_pid(index)
        if pid is not None:
            self._jvms.kill(pid, sig)
        return pid

    def restart_supervisor(self, index: int) -> int:
        """Start supervisor ``index`` again (same dir, so same id, slots and workers).

        Returns once Nimbus lists every supervisor again.

        Raises:
            StormClusterError: it exited or did not register in time.
        """
        sup = self.supervisor(index)
        if self.supervisor_pid(index) is not None:
            return sup.pid or 0
        home = self._home or StormHome(Path(self.info.storm_home), self.info.version)
        pid = self._jvms.spawn_supervisor(sup, home, java_binary(self.java_home))
        sups = tuple(
            replace(s, pid=pid) if s.index == index else s
            for s in self.info.supervisors
        )
        self._info = replace(self.info, supervisors=sups)
        save_info(self.root, self.info)
        try:
            self._wait(sup.name, pid, "did not register with Nimbus",
                       lambda s: len(s.supervisors) >= len(sups))  # fmt: skip
        except BaseException:
            self._terminate_all([pid])
            raise
        return pid

    def wait_supervisors(
        self, count: int, *, timeout_s: float = 60.0
    ) -> ClusterSummary:
        """Wait until Nimbus lists exactly ``count`` supervisors; return the summary.

        A SIGKILLed supervisor leaves once its ZooKeeper session expires
        (``storm.zookeeper.session.timeout``, 8 s here).

        Raises:
            StormClusterError: not so within ``timeout_s``.
        """
        return wait_supervisors(self, count, timeout_s=timeout_s)

    # --- stopping --------------------------------------------------------------

    def stop(self) -> list[int]:
        """Stop supervisors, their workers, then Nimbus (SIGTERM, then SIGKILL).

        Workers outlive their supervisor on Storm, so they are found by their
        ``storm.local.dir`` (or, for Python subprocesses, their working dir)
        and stopped too. Idempotent; does nothing on a cluster never started.

        Returns:
            The pids that were stopped.
        """
        if self._info is None:
            return []
        stopped = []
        for sup in self._info.supervisors:
            if sup.pid is not None and is_supervisor(sup):
                self._terminate_all([sup.pid])
                stopped.append(sup.pid)
        workers = cluster_processes(self.root, self._info)
        self._terminate_all(workers)
        stopped += workers
        pid = self.nimbus_pid
        if pid is not None:
            self._terminate_all([pid])
            stopped.append(pid)
        self._jvms.reap()  # children that died early too
        sups = tuple(replace(s, pid=None) for s in self._info.supervisors)
        self._info = replace(self._info, nimbus_pid=None, supervisors=sups)
        if (self.root / STATE_FILE).exists():
            save_info(self.root, self.info)
        return stopped

    def _terminate_all(self, targets: list[int]) -> None:
        self._jvms.terminate(targets, grace_s=self.stop_timeout_s)

    def __enter__(self) -> ApacheStormCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
