"""Start and stop a single loopback ZooKeeper from Debian's ``zookeeper`` package.

Used by the test suite, ``sr3 lab`` and ``sr3 demo`` when ``sr3.zk.hosts`` is
empty. The server listens on 127.0.0.1 (or, in the netns lab, its host's
address inside that host's namespace), keeps its data in ``data_dir`` (so
sessions survive a restart) and logs to ``data_dir/zookeeper.log``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from sr3.errors import CoordinationError, ZooKeeperMissingError
from sr3.jvm import LAB_JVM_FLAGS
from sr3.net import bindable, free_port

__all__ = ["DEFAULT_JAR", "EmbeddedZooKeeper", "port_taken"]

logger = logging.getLogger(__name__)

DEFAULT_JAR = Path("/usr/share/java/zookeeper.jar")
# Optional: without an slf4j binding ZooKeeper logs nothing useful.
_LOG_JARS = (
    Path("/usr/share/java/slf4j-log4j12.jar"),
    Path("/usr/share/java/log4j-1.2.jar"),
)
_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_LOG4J = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] %m%n
"""
E_MISSING = (
    "{what} {path} not found: ZooKeeper cannot start. Install Debian's ZooKeeper "
    "and a JRE with `apt-get install zookeeper default-jre-headless`, or run "
    "`make setup`; or point sr3.zk.hosts at a running ensemble"
)
_LOG_TAIL_LINES = 30
_PROBE_TIMEOUT_S = 0.5
_POLL_S = 0.05
_STOP_TIMEOUT_S = 10.0


def port_taken(port: int) -> bool:
    """Return whether something listens on 127.0.0.1:``port``."""
    # Like ZooKeeper itself, ignore TIME_WAIT leftovers of our previous run.
    return not bindable("127.0.0.1", port, ignore_time_wait=True)


def _alive(pid: int) -> bool:
    """Return whether ``pid`` runs (a zombie, killed but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return False
    # state is the field after the parenthesised command name
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server child process, loopback only.

    Args:
        data_dir: Holds ``zoo.cfg``, ``data/``, ``zookeeper.log`` and, when
            detached, ``zookeeper.pid``. Created if missing.
        port: Client port; 0 picks a free one on the first start and keeps it
            across restarts.
        tick_time_ms: ZooKeeper tick (default 200 ms); the minimum session
            timeout is two ticks.
        max_session_timeout_ms: Largest session timeout granted (default 30 s).
        java: The ``java`` executable (a name on PATH or a path).
        jar: ZooKeeper's jar (default Debian's ``/usr/share/java/zookeeper.jar``).
        detached: Start the server in its own session and write its pid to
            ``zookeeper.pid`` so it outlives this process; stop it later with
            :meth:`stop_detached`.
        host: The address it listens on (default loopback; the netns lab gives
            its host's address).
        command_prefix: Runs the server through this prefix (the netns lab's
            ``ip netns exec NS``, which execs, so the pid stays the server's).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        tick_time_ms: int = 200,
        max_session_timeout_ms: int = 30000,
        java: str = "java",
        jar: Path = DEFAULT_JAR,
        detached: bool = False,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.java = java
        self.jar = Path(jar)
        self.detached = detached
        self.host = host
        self.command_prefix = list(command_prefix)
        self._port: int | None = port or None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"EmbeddedZooKeeper({str(self.data_dir)!r}, port={self._port})"

    @property
    def port(self) -> int:
        """The client port (kept across restarts).

        Raises:
            CoordinationError: no port yet (``port=0`` and never started).
        """
        if self._port is None:
            msg = f"{self!r} has no port yet; call start() first"
            raise CoordinationError(msg)
        return self._port

    @property
    def hosts(self) -> str:
        """``HOST:PORT`` for ``sr3.zk.hosts``.

        Raises:
            CoordinationError: no port yet (``port=0`` and never started).
        """
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's pid while started from this object, else None."""
        return None if self._proc is None else self._proc.pid

    @property
    def log_path(self) -> Path:
        """The server's combined stdout/stderr log."""
        return self.data_dir / "zookeeper.log"

    @property
    def config_path(self) -> Path:
        """The generated ``zoo.cfg``."""
        return self.data_dir / "zoo.cfg"

    def is_running(self) -> bool:
        """Return whether the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """Return the last ``lines`` lines of the server log ("" if none)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _command(self) -> list[str]:
        java = shutil.which(self.java)
        if java is None:
            raise ZooKeeperMissingError(E_MISSING.format(what="java", path=self.java))
        if not self.jar.is_file():
            raise ZooKeeperMissingError(
                E_MISSING.format(what="ZooKeeper jar", path=self.jar)
            )
        classpath = [self.jar]
        props: list[str] = []
        if all(jar.is_file() for jar in _LOG_JARS):
            classpath.extend(_LOG_JARS)
            log4j = self.data_dir / "log4j.properties"
            log4j.write_text(_LOG4J, encoding="utf-8")
            props.append(f"-Dlog4j.configuration=file:{log4j}")
        cp = ":".join(str(p) for p in classpath)
        return [
            *self.command_prefix,
            java,
            "-Xmx256m",
            *LAB_JVM_FLAGS,
            *props,
            "-cp",
            cp,
            _MAIN,
            str(self.config_path),
        ]

    def _write_config(self, port: int) -> None:
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            # no cap on connections per client address (ZooKeeper's default is
            # 60): every client of a loopback lab comes from 127.0.0.1, and labs
            # on one server (`sr3 lab up --zk`) add up
            "maxClientCnxns=0",
            "4lw.commands.whitelist=srvr,mntr,ruok",
        ]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and return once a ZooKeeper session can be opened.

        Raises:
            ZooKeeperMissingError: java or the ZooKeeper jar is not installed.
            CoordinationError: the server died or did not serve within
                ``timeout_s``; the message carries the log tail.
        """
        if self.is_running():
            return
        self.stop()  # reap a crashed earlier run and close its log
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pid = self.detached_pid(self.data_dir)
        if pid is not None:
            msg = (
                f"a ZooKeeper (pid {pid}) already runs in {self.data_dir}: another "
                "lab uses this dir (`sr3 lab up` still starting, or a lab left up); "
                "use another --dir, or stop that lab with `sr3 lab down`"
            )
            raise CoordinationError(msg)
        command = self._command()
        if self._port is None:
            self._port = free_port()
        elif not self.command_prefix and port_taken(self._port):
            # The readiness probe would happily talk to whoever listens there.
            msg = (
                f"port {self._port} on 127.0.0.1 is in use, so ZooKeeper in "
                f"{self.data_dir} cannot listen on it; stop the other process or "
                "pass port=0 to pick a free port"
            )
            raise CoordinationError(msg)
        self._write_config(self._port)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=self.detached,
        )
        if self.detached:
            (self.data_dir / "zookeeper.pid").write_text(f"{self._proc.pid}\n")
        logger.info("ZooKeeper pid %s starting on %s", self._proc.pid, self.hosts)
        try:
            self._wait_serving(self._proc, timeout_s)
        except CoordinationError:
            self.stop()
            raise

    def _wait_serving(self, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
        # `ruok` answers before the server serves; only a session proves it.
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                msg = (
                    f"ZooKeeper on {self.hosts} exited with code "
                    f"{proc.returncode} while starting; log "
                    f"{self.log_path} ends with:\n{self.log_tail()}"
                )
                raise CoordinationError(msg)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"ZooKeeper on {self.hosts} did not serve within {timeout_s} s; "
                    f"log {self.log_path} ends with:\n{self.log_tail()}"
                )
                raise CoordinationError(msg)
            if self._probe(min(_PROBE_TIMEOUT_S, remaining)):
                logger.info("ZooKeeper serving on %s", self.hosts)
                return

    def _probe(self, timeout_s: float) -> bool:
        # A cheap `srvr` first keeps kazoo's connection-refused warnings out of
        # the log; `srvr` answers only once the server serves, unlike `ruok`.
        try:
            with socket.create_connection((self.host, self.port), timeout_s) as sock:
                sock.sendall(b"srvr")
                reply = sock.recv(4096)
        except OSError:
            reply = b""
        if b"Zookeeper version" not in reply:
            time.sleep(_POLL_S)
            return False
        client = KazooClient(hosts=self.hosts, timeout=timeout_s)
        try:
            client.start(timeout=timeout_s)
        except KazooTimeoutError:
            return False  # start() has already stopped and closed the client
        client.stop()
        client.close()
        return True

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Stop the server: SIGTERM, wait up to ``timeout_s``, then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("ZooKeeper pid %s ignored SIGTERM; killing", proc.pid)
                proc.kill()
                proc.wait()
        if proc is not None and self.detached:
            (self.data_dir / "zookeeper.pid").unlink(missing_ok=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def detached_pid(data_dir: Path) -> int | None:
        """Return the pid of a live detached server of ``data_dir``, else None.

        The pid file is trusted only if that process runs ZooKeeper with this
        ``data_dir``'s zoo.cfg, so a recycled pid is never signalled.
        """
        config = str(Path(data_dir).resolve() / "zoo.cfg")
        try:
            pid = int((Path(data_dir) / "zookeeper.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return None
        ours = _MAIN.encode() in cmdline and config.encode() in cmdline
        return pid if ours and _alive(pid) else None

    @staticmethod
    def detached_hosts(data_dir: Path) -> str | None:
        """Return ``HOST:PORT`` from ``data_dir``'s zoo.cfg, else None."""
        try:
            text = (Path(data_dir) / "zoo.cfg").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        values = dict(line.partition("=")[::2] for line in text.splitlines())
        values = {k.strip(): v.strip() for k, v in values.items()}
        if "clientPort" not in values:
            return None
        host = values.get("clientPortAddress", "127.0.0.1")
        return f"{host}:{values['clientPort']}"

    @classmethod
    def stop_detached(
        cls, data_dir: Path, *, timeout_s: float = _STOP_TIMEOUT_S
    ) -> bool:
        """Stop the detached server whose pid is in ``data_dir/zookeeper.pid``.

        Returns:
            True if a running server was stopped, False if none ran.
        """
        pid_file = Path(data_dir) / "zookeeper.pid"
        pid = cls.detached_pid(data_dir)
        if pid is None:
            pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            logger.warning("ZooKeeper pid %s ignored SIGTERM; killing", pid)
            os.kill(pid, signal.SIGKILL)
            while _alive(pid) and time.monotonic() < deadline + timeout_s:
                time.sleep(0.05)
        pid_file.unlink(missing_ok=True)
        return True

    def __enter__(self) -> EmbeddedZooKeeper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
