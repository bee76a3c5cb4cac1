"""A real Apache Storm cluster (Nimbus and N supervisors) on 127.0.0.1, from Maven jars.

Layout of the cluster's root dir (a lab's ``storm/``)::

    cluster.json          version, ports, pids (written by start())
    conf/storm.yaml       the cluster's conf, read by every daemon and worker
    nimbus.out            a daemon's stdout/stderr (JVM crashes, early errors)
    supervisor-<i>.out
    logs/                 storm.log.dir: nimbus.log, supervisor-<i>.log and
                          workers-artifacts/<topology>/<port>/worker.log
    local/nimbus/         Nimbus's storm.local.dir (blobs)
    local/supervisor-<i>/ supervisor i's storm.local.dir (its id, workers)

Nimbus and supervisors run ``org.apache.storm.daemon.*`` main classes directly
(see :mod:`storm_bridge.apache.launcher`); supervisors launch worker JVMs
themselves, as Storm's supervisors do. Readiness is Nimbus's own answer over
Thrift (a leader, then every supervisor registered), never a sleep. A cluster
started ``detached`` (``sr3 lab up --storm``) outlives this process;
:meth:`ApacheStormCluster.attach` rebuilds it from ``cluster.json``. Pids are
only signalled after ``/proc/<pid>/cmdline`` proves they are this cluster's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from storm_bridge.apache.home import StormHome, java_binary
from storm_bridge.apache.launcher import DAEMON_MAINS, daemon_command
from storm_bridge.apache.nimbus import (
    ClusterSummary,
    NimbusClient,
    NimbusUnreachableError,
)
from storm_bridge.apache.procs import (
    cmdline,
    cwd,
    free_port,
    pids,
    port_free,
    terminate_all,
)
from storm_bridge.apache.state import (
    StormClusterInfo,
    SupervisorInfo,
    cluster_conf,
    write_yaml,
)
from storm_bridge.errors import StormBridgeError

__all__ = [
    "DEFAULT_NIMBUS_PORT",
    "ApacheStormCluster",
    "StormClusterError",
]

logger = logging.getLogger(__name__)

DEFAULT_NIMBUS_PORT: Final = 6627
WORKER_MAIN: Final = "org.apache.storm.daemon.worker.Worker"
#: The JVM a supervisor starts per worker; its argv holds the worker's command.
LOG_WRITER_MAIN: Final = "org.apache.storm.LogWriter"
_STATE: Final = "cluster.json"
_POLL_S: Final = 0.2
_LOG_TAIL_LINES: Final = 25
_STACK_FRAME: Final = re.compile(r"\s+(at |\.\.\. \d+ more)")
#: Why there is no UI: storm-webapp (``org.apache.storm.daemon.ui.UIServer``)
#: is not served by Maven Central for any 2.x release.
UI_UNAVAILABLE: Final = (
    "no Storm UI: org.apache.storm:storm-webapp is not on Maven Central, so the "
    "lab cannot fetch it; use `sr3 status` (Nimbus's Thrift API) instead"
)

E_PORT_TAKEN = (
    "cannot start Nimbus on 127.0.0.1:{port}: the port is taken by another "
    "process. Stop it, or start the cluster on another port (`sr3 lab up --storm "
    "--nimbus-port PORT`, or 0 for any free port) and point clients there "
    '(config.json\'s env `lab`: "nimbus": "127.0.0.1:PORT")'
)
E_NOT_READY = (
    "Storm {daemon} (pid {pid}) {what} within {timeout} s; {log} ends with:\n{tail}"
)
E_EXITED = (
    "Storm {daemon} (pid {pid}) exited with code {code} while starting; {log} "
    "ends with:\n{tail}"
)


class StormClusterError(StormBridgeError):
    """A Storm daemon did not start or stop, or is not this cluster's."""


class ApacheStormCluster:
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
        self._info: StormClusterInfo | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def __repr__(self) -> str:
        where = self._info.nimbus if self._info else "not started"
        return f"ApacheStormCluster({str(self.root)!r}, {where})"

    # --- what it is ------------------------------------------------------------

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
        return NimbusClient("127.0.0.1", self.info.nimbus_port, timeout_s=timeout_s)

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
        return pid if pid is not None and self._is_nimbus(pid) else None

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
        return sup.pid if sup.pid is not None and self._is_supervisor(sup) else None

    def worker_pids(self, index: int | None = None) -> list[int]:
        """Return the worker JVMs of supervisor ``index`` (None: of every one).

        A worker is an ``org.apache.storm.daemon.worker.Worker`` JVM whose
        ``-Dstorm.local.dir`` is its supervisor's, found in ``/proc``; each
        has a LogWriter JVM as its parent, not counted here.
        """
        if self._info is None:
            return []
        sups = self._info.supervisors if index is None else (self.supervisor(index),)
        marks = {f"-Dstorm.local.dir={s.local_dir}" for s in sups}
        found = []
        for pid in pids():
            argv = cmdline(pid)
            is_worker = WORKER_MAIN in argv and LOG_WRITER_MAIN not in argv
            if is_worker and marks & set(argv):
                found.append(pid)
        return sorted(found)

    def _worker_processes(self) -> list[int]:
        """Workers, their LogWriters and their Python subprocesses (any supervisor)."""
        local = f"{self.root}/local/"
        found = []
        daemons = {self._info.nimbus_pid} if self._info else set()
        daemons |= {s.pid for s in self._info.supervisors} if self._info else set()
        for pid in pids():
            if pid in daemons or pid == os.getpid():
                continue
            argv = cmdline(pid)
            if not argv:
                continue
            if any(a.startswith(f"-Dstorm.local.dir={local}") for a in argv) or (
                f"{cwd(pid)}/".startswith(local)
            ):
                found.append(pid)
        return sorted(found)

    def log_path(self, name: str) -> Path:
        """Return the log4j log of ``nimbus`` or ``supervisor-<i>``."""
        return self.log_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = _LOG_TAIL_LINES) -> str:
        """Return the tails of a daemon's stdout/stderr and of its log.

        Java stack frames are left out, so the tail shows the errors themselves.
        """
        parts = []
        for path in (self.root / f"{name}.out", self.log_path(name)):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            kept = [
                line
                for line in text.splitlines()
                if line.strip() and not _STACK_FRAME.match(line)
            ]
            if kept:
                tail = "\n".join(kept[-lines:])
                parts.append(f"--- {path} ---\n{tail}")
        return "\n".join(parts) or "(no output)"

    def status(self) -> dict[str, Any]:
        """Return a JSON-able summary: nimbus, UI, supervisors with slots, topologies.

        Never raises for an unreachable Nimbus: ``error`` then says why, and
        the process fields still tell what runs.
        """
        info = self.info
        out: dict[str, Any] = {
            "version": info.version,
            "nimbus": info.nimbus,
            "nimbus_pid": self.nimbus_pid,
            "leader": False,
            "ui": None if info.ui_port is None else f"http://127.0.0.1:{info.ui_port}",
            "ui_note": UI_UNAVAILABLE if info.ui_port is None else None,
            "zk": f"{info.zk_hosts}{info.zk_root}",
            "conf_file": info.conf_file,
            "logs": str(self.log_dir),
            "supervisors": [],
            "supervisor_processes": [
                {
                    "name": s.name,
                    "pid": self.supervisor_pid(s.index),
                    "slots": list(s.slots),
                    "workers": self.worker_pids(s.index),
                    "local_dir": s.local_dir,
                }
                for s in info.supervisors
            ],
            "topologies": [],
            "error": None,
        }
        try:
            summary = self.summary()
        except NimbusUnreachableError as exc:
            out["error"] = str(exc)
            return out
        out["leader"] = summary.leader is not None
        out["supervisors"] = [
            {**asdict(s), "free_slots": s.free_slots} for s in summary.supervisors
        ]
        out["topologies"] = [asdict(t) for t in summary.topologies]
        return out

    def _is_nimbus(self, pid: int) -> bool:
        argv = cmdline(pid)
        return (
            DAEMON_MAINS["nimbus"] in argv
            and f"-Dstorm.conf.file={self.conf_file}" in argv
        )

    def _is_supervisor(self, sup: SupervisorInfo) -> bool:
        argv = cmdline(sup.pid) if sup.pid else []
        return (
            DAEMON_MAINS["supervisor"] in argv
            and f"-Dsr3.storm.dir={sup.local_dir}" in argv
        )

    # --- lifecycle -------------------------------------------------------------

    @classmethod
    def attach(
        cls, root: Path, *, env: Mapping[str, str] | None = None
    ) -> ApacheStormCluster:
        """Return the cluster described by ``root/cluster.json``.

        Its pids are trusted only while their command lines match, so a stale
        file (cluster gone, pids recycled) is harmless.

        Args:
            root: The cluster's root dir.
            env: Extra environment for supervisors it restarts (not recorded
                in cluster.json: it may hold a secret).

        Raises:
            StormClusterError: there is no readable ``cluster.json``.
        """
        path = Path(root) / _STATE
        try:
            info = StormClusterInfo.from_json(
                json.loads(path.read_text(encoding="utf-8"))
            )
        except (OSError, ValueError, TypeError, KeyError) as exc:
            msg = f"no Apache Storm cluster recorded in {path}: {exc}"
            raise StormClusterError(msg) from exc
        cluster = cls(
            Path(root),
            zk_hosts=info.zk_hosts,
            zk_root=info.zk_root,
            supervisors=max(1, len(info.supervisors)),
            nimbus_port=info.nimbus_port,
            home=StormHome(Path(info.storm_home), info.version),
            env=env,
            detached=True,
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
        port = self._pick_nimbus_port()
        sups = tuple(
            SupervisorInfo(
                index=i,
                local_dir=str(self.root / "local" / f"supervisor-{i}"),
                slots=tuple(free_port() for _ in range(self.slots)),
                thrift_port=free_port(),
            )
            for i in range(1, self.supervisor_count + 1)
        )
        info = StormClusterInfo(
            version=home.version,
            storm_home=str(home.root),
            conf_file=str(self.conf_file),
            zk_hosts=self.zk_hosts,
            zk_root=self.zk_root,
            nimbus_port=port,
            supervisors=sups,
        )
        self._info = info
        self._write_conf(info)
        started = time.monotonic()
        try:
            pid = self._spawn("nimbus", home, java, {})
            self._info = info = replace(info, nimbus_pid=pid)
            sups = tuple(
                replace(s, pid=self._spawn_supervisor(s, home, java)) for s in sups
            )
            self._info = info = replace(info, supervisors=sups)
            self._save()
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

    def _pick_nimbus_port(self) -> int:
        if self.nimbus_port is None:
            if port_free(DEFAULT_NIMBUS_PORT):
                return DEFAULT_NIMBUS_PORT
            port = free_port()
            logger.warning(
                "Nimbus's default port %s is taken; this cluster's Nimbus listens on "
                "%s (point config.json's env `lab` or --nimbus there)",
                DEFAULT_NIMBUS_PORT,
                port,
            )
            return port
        if self.nimbus_port == 0:
            return free_port()
        if not port_free(self.nimbus_port):
            raise StormClusterError(E_PORT_TAKEN.format(port=self.nimbus_port))
        return self.nimbus_port

    def _write_conf(self, info: StormClusterInfo) -> None:
        conf = cluster_conf(
            info,
            root=self.root,
            log_dir=self.log_dir,
            worker_heap_mb=self.worker_heap_mb,
            extra=self.conf,
        )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_yaml(self.conf_file, conf, f"the Apache Storm cluster in {self.root}")

    def _spawn_supervisor(self, sup: SupervisorInfo, home: StormHome, java: str) -> int:
        Path(sup.local_dir).mkdir(parents=True, exist_ok=True)
        options = {
            "storm.local.dir": sup.local_dir,
            "supervisor.slots.ports": list(sup.slots),
            "supervisor.thrift.port": sup.thrift_port,
        }
        return self._spawn(
            sup.name, home, java, options, jvm_args=[f"-Dsr3.storm.dir={sup.local_dir}"]
        )

    def _spawn(
        self,
        name: str,
        home: StormHome,
        java: str,
        options: Mapping[str, object],
        jvm_args: list[str] | None = None,
    ) -> int:
        daemon = name.split("-", 1)[0]
        argv = daemon_command(
            home, daemon, conf_file=self.conf_file, log_dir=self.log_dir, name=name,
            heap_mb=self.heap_mb, options=options, java=java, jvm_args=jvm_args or [],
        )  # fmt: skip
        env = {**os.environ, **self.env, "STORM_CONF_DIR": str(self.conf_file.parent)}
        if self.java_home:
            env["JAVA_HOME"] = self.java_home  # the supervisor runs workers with it
        with (self.root / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen(  # noqa: S603 (argv built here)
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=self.detached,
            )
        self._procs[proc.pid] = proc
        logger.info("Storm %s pid %s starting", name, proc.pid)
        return proc.pid

    def _wait(
        self, name: str, pid: int, what: str, ready: Callable[[ClusterSummary], bool]
    ) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            self._check_started()
            try:
                if ready(self.summary()):
                    return
            except NimbusUnreachableError:
                pass  # Nimbus still starting
            if time.monotonic() > deadline:
                msg = E_NOT_READY.format(
                    daemon=name, pid=pid, what=what, timeout=self.start_timeout_s,
                    log=self.root / f"{name}.out", tail=self.log_tail(name),
                )  # fmt: skip
                raise StormClusterError(msg)
            time.sleep(_POLL_S)  # readiness through Thrift/proc: poll to a deadline

    def _check_started(self) -> None:
        """Raise if a daemon started by this object has exited."""
        info = self.info
        named = [("nimbus", info.nimbus_pid)] + [
            (s.name, s.pid) for s in info.supervisors
        ]
        for name, pid in named:
            proc = self._procs.get(pid or 0)
            if proc is not None and proc.poll() is not None:
                msg = E_EXITED.format(
                    daemon=name, pid=pid, code=proc.returncode,
                    log=self.root / f"{name}.out", tail=self.log_tail(name),
                )  # fmt: skip
                raise StormClusterError(msg)

    def _save(self) -> None:
        tmp = self.root / (_STATE + ".tmp")
        tmp.write_text(json.dumps(self.info.to_json(), indent=2), encoding="utf-8")
        tmp.replace(self.root / _STATE)

    # --- failures and restarts -------------------------------------------------

    def kill_supervisor(self, index: int, sig: int = signal.SIGKILL) -> int | None:
        """Send ``sig`` to supervisor ``index``; return its pid (None: not running).

        Its workers keep running, as on a real cluster.
        """
        pid = self.supervisor_pid(index)
        if pid is not None:
            os.kill(pid, sig)
            proc = self._procs.pop(pid, None)
            if proc is not None:
                proc.wait()
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
        pid = self._spawn_supervisor(sup, home, java_binary(self.java_home))
        sups = tuple(
            replace(s, pid=pid) if s.index == index else s
            for s in self.info.supervisors
        )
        self._info = replace(self.info, supervisors=sups)
        self._save()
        try:
            self._wait(sup.name, pid, "did not register with Nimbus",
                       lambda s: len(s.supervisors) >= len(sups))  # fmt: skip
        except BaseException:
            self._terminate(pid)
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
        deadline = time.monotonic() + timeout_s
        seen: ClusterSummary | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(NimbusUnreachableError):
                seen = self.summary()
                if len(seen.supervisors) == count:
                    return seen
            time.sleep(_POLL_S)  # readiness through Thrift/proc: poll to a deadline
        have = (
            "Nimbus unreachable" if seen is None else f"{len(seen.supervisors)} listed"
        )
        msg = (
            f"Nimbus at {self.nimbus} did not list {count} supervisor(s) within "
            f"{timeout_s} s ({have}); see the supervisor logs in {self.log_dir}"
        )
        raise StormClusterError(msg)

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
            if sup.pid is not None and self._is_supervisor(sup):
                self._terminate(sup.pid)
                stopped.append(sup.pid)
        workers = self._worker_processes()
        self._terminate_all(workers)
        stopped += workers
        pid = self.nimbus_pid
        if pid is not None:
            self._terminate(pid)
            stopped.append(pid)
        for proc in list(self._procs.values()):  # children that died early
            proc.wait()
        self._procs.clear()
        sups = tuple(replace(s, pid=None) for s in self._info.supervisors)
        self._info = replace(self._info, nimbus_pid=None, supervisors=sups)
        if (self.root / _STATE).exists():
            self._save()
        return stopped

    def _terminate(self, pid: int) -> None:
        self._terminate_all([pid])

    def _terminate_all(self, targets: list[int]) -> None:
        terminate_all(targets, self._procs, grace_s=self.stop_timeout_s)

    def __enter__(self) -> ApacheStormCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
