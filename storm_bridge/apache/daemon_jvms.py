"""The Storm daemon JVMs one process starts: launching, readiness, output, stopping.

A daemon's stdout/stderr goes to ``<root>/<name>.out`` and its log4j log to
``<log_dir>/<name>.log``; an error about a daemon that exited or was not ready
quotes the tails of both, Java stack frames left out. Readiness is Nimbus's own
answer over Thrift, polled to a deadline, never a sleep.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storm_bridge.apache.home import StormHome
from storm_bridge.apache.launcher import daemon_command
from storm_bridge.apache.nimbus import ClusterSummary, NimbusUnreachableError
from storm_bridge.apache.procs import terminate_all
from storm_bridge.apache.state import StormClusterInfo, SupervisorInfo
from storm_bridge.errors import StormBridgeError

__all__ = ["LOG_TAIL_LINES", "DaemonJvms", "DaemonStart", "StormClusterError"]

logger = logging.getLogger(__name__)

_POLL_S: Final = 0.2
LOG_TAIL_LINES: Final = 25
_STACK_FRAME: Final = re.compile(r"\s+(at |\.\.\. \d+ more)")

E_NOT_READY = (
    "Storm {daemon} (pid {pid}) {what} within {timeout} s; {log} ends with:\n{tail}"
)
E_EXITED = (
    "Storm {daemon} (pid {pid}) exited with code {code} while starting; {log} "
    "ends with:\n{tail}"
)


class StormClusterError(StormBridgeError):
    """A Storm daemon did not start or stop, or is not this cluster's."""


@dataclass(frozen=True)
class DaemonStart:
    """What one daemon's command line is made of (:func:`daemon_command`'s inputs).

    Given to a cluster's ``launch_through``, which returns a command that execs
    the same command line (the netns lab: the wrapper
    ``vagrant/provision/storm.sh`` writes from these).
    """

    name: str
    daemon: str
    conf_file: Path
    log_dir: Path
    heap_mb: int
    options: Mapping[str, object]
    java: str
    jvm_args: tuple[str, ...]


class DaemonJvms:
    """Starts Nimbus and supervisor JVMs and keeps the ones it started.

    Args:
        root: The cluster's root dir: the JVMs' working dir, ``<name>.out``.
        conf_file: The cluster's ``storm.yaml``.
        log_dir: ``storm.log.dir``.
        heap_mb: ``-Xmx`` of each daemon.
        env: Extra environment of the daemons, inherited by workers.
        java_home: A JDK the supervisors run workers with (None: inherited).
        detached: Start the JVMs in their own session (they outlive this process).
        start_timeout_s: How long a daemon gets to be ready.
        launch_through: Given a daemon's :class:`DaemonStart`, returns the
            command to run instead of its command line, one that execs it.
    """

    def __init__(  # noqa: PLR0913 (keyword-only options)
        self,
        *,
        root: Path,
        conf_file: Path,
        log_dir: Path,
        heap_mb: int,
        env: Mapping[str, str],
        java_home: str | None,
        detached: bool,
        start_timeout_s: float,
        launch_through: Callable[[DaemonStart], list[str]] | None = None,
    ) -> None:
        self._root = root
        self._launch_through = launch_through
        self._conf_file = conf_file
        self._log_dir = log_dir
        self._heap_mb = heap_mb
        self._env = env
        self._java_home = java_home
        self._detached = detached
        self._start_timeout_s = start_timeout_s
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    # --- output ----------------------------------------------------------------

    def log_path(self, name: str) -> Path:
        """Return the log4j log of ``nimbus`` or ``supervisor-<i>``."""
        return self._log_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        """Return the tails of a daemon's stdout/stderr and of its log.

        Java stack frames are left out, so the tail shows the errors themselves.
        """
        parts = []
        for path in (self._root / f"{name}.out", self.log_path(name)):
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

    # --- starting --------------------------------------------------------------

    def spawn_supervisor(self, sup: SupervisorInfo, home: StormHome, java: str) -> int:
        """Start supervisor ``sup`` in its local dir; return its pid."""
        Path(sup.local_dir).mkdir(parents=True, exist_ok=True)
        options = {
            "storm.local.dir": sup.local_dir,
            "supervisor.slots.ports": list(sup.slots),
            "supervisor.thrift.port": sup.thrift_port,
            "storm.local.hostname": sup.host,
        }
        return self.spawn(
            sup.name, home, java, options,
            jvm_args=[f"-Dsr3.storm.dir={sup.local_dir}"],
            launch_prefix=sup.launch_prefix,
        )  # fmt: skip

    def spawn(
        self,
        name: str,
        home: StormHome,
        java: str,
        options: Mapping[str, object],
        jvm_args: list[str] | None = None,
        launch_prefix: Sequence[str] = (),
    ) -> int:
        """Start daemon ``name`` (``nimbus`` or ``supervisor-<i>``); return its pid.

        ``launch_prefix`` runs it elsewhere (a network namespace); it must exec
        the JVM, so the pid returned is the JVM's.
        """
        start = DaemonStart(
            name=name, daemon=name.split("-", 1)[0], conf_file=self._conf_file,
            log_dir=self._log_dir, heap_mb=self._heap_mb, options=dict(options),
            java=java, jvm_args=tuple(jvm_args or ()),
        )  # fmt: skip
        if self._launch_through is not None:
            command = self._launch_through(start)
        else:
            command = daemon_command(
                home, start.daemon, conf_file=start.conf_file, log_dir=start.log_dir,
                name=name, heap_mb=start.heap_mb, options=start.options, java=java,
                jvm_args=start.jvm_args,
            )  # fmt: skip
        argv = [*launch_prefix, *command]
        env = {**os.environ, **self._env, "STORM_CONF_DIR": str(self._conf_file.parent)}
        if self._java_home:
            env["JAVA_HOME"] = self._java_home  # the supervisor runs workers with it
        with (self._root / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen(  # noqa: S603 (argv built here)
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._root,
                start_new_session=self._detached,
            )
        self._procs[proc.pid] = proc
        logger.info("Storm %s pid %s starting", name, proc.pid)
        return proc.pid

    def wait_ready(  # noqa: PLR0913 (what to wait for, and how to ask)
        self,
        name: str,
        pid: int,
        what: str,
        ready: Callable[[ClusterSummary], bool],
        info: StormClusterInfo,
        *,
        summary: Callable[[], ClusterSummary],
    ) -> None:
        """Poll ``summary()`` until ``ready`` holds for it.

        Args:
            name: The daemon waited for.
            pid: Its pid.
            what: What it failed to do, for the error (``did not lead``).
            ready: Whether a summary shows it ready.
            info: The cluster: each of its daemons is checked for an exit.
            summary: Asks Nimbus for the cluster summary.

        Raises:
            StormClusterError: a daemon exited, or not ready in time.
        """
        daemons = [("nimbus", info.nimbus_pid)] + [
            (s.name, s.pid) for s in info.supervisors
        ]
        deadline = time.monotonic() + self._start_timeout_s
        while True:
            self.check_started(daemons)
            try:
                if ready(summary()):
                    return
            except NimbusUnreachableError:
                pass  # Nimbus still starting
            if time.monotonic() > deadline:
                msg = E_NOT_READY.format(
                    daemon=name, pid=pid, what=what, timeout=self._start_timeout_s,
                    log=self._root / f"{name}.out", tail=self.log_tail(name),
                )  # fmt: skip
                raise StormClusterError(msg)
            time.sleep(_POLL_S)  # readiness through Thrift/proc: poll to a deadline

    def check_started(self, daemons: Sequence[tuple[str, int | None]]) -> None:
        """Raise if one of ``daemons`` (name, pid) started by this object has exited.

        Raises:
            StormClusterError: it exited (the message quotes its output).
        """
        for name, pid in daemons:
            proc = self._procs.get(pid or 0)
            if proc is not None and proc.poll() is not None:
                msg = E_EXITED.format(
                    daemon=name, pid=pid, code=proc.returncode,
                    log=self._root / f"{name}.out", tail=self.log_tail(name),
                )  # fmt: skip
                raise StormClusterError(msg)

    # --- stopping --------------------------------------------------------------

    def kill(self, pid: int, sig: int) -> None:
        """Send ``sig`` to ``pid``; reap it if this object started it."""
        os.kill(pid, sig)
        proc = self._procs.pop(pid, None)
        if proc is not None:
            proc.wait()

    def terminate(self, targets: list[int], *, grace_s: float) -> None:
        """SIGTERM ``targets``, SIGKILL those left after ``grace_s``; reap ours."""
        terminate_all(targets, self._procs, grace_s=grace_s)

    def reap(self) -> None:
        """Wait for every JVM started here (those that died early too); forget them."""
        for proc in list(self._procs.values()):
            proc.wait()
        self._procs.clear()
