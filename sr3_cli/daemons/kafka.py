"""One Apache Kafka broker (KRaft, combined broker and controller) as a child JVM.

It runs the fetched Kafka :class:`~sr3_cli.daemons.kafka_home.KafkaHome` with
the configuration :mod:`sr3_cli.daemons.kafka_config` renders.
:class:`KafkaBroker` formats a storage directory once
(``kafka.tools.StorageTool format --standalone`` with a generated cluster id)
and runs ``kafka.Kafka server.properties`` on two free loopback ports. Layout of
the broker's root dir::

    broker.json        bootstrap address, ports, pid, cluster id
    server.properties  the broker's configuration
    data/              log.dirs (topics, the KRaft metadata log)
    logs/server.log    the broker's log (log4j2)
    broker.out         the JVM's stdout and stderr

The broker is ready when a Kafka admin client lists its topics; nothing sleeps.
A restart (:meth:`KafkaBroker.start` after :meth:`KafkaBroker.kill`) keeps the
ports and the data. Pids are only signalled after their command line proves
they are this broker's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

from sr3.jvm import LAB_JVM_FLAGS
from sr3.net import free_port
from sr3_cli.daemons.kafka_config import BrokerInfo, new_cluster_id, server_properties
from sr3_cli.daemons.kafka_home import (
    KafkaBrokerError,
    KafkaHome,
    java_binary,
    pinned_version,
)
from sr3_cli.processes import alive, command_line

# KafkaBrokerError lives in kafka_home (KafkaMissingError derives from it); it
# is re-exported here because sr3_cli/lab_kafka.py imports it from this module.
__all__ = ["KafkaBroker", "KafkaBrokerError"]

logger = logging.getLogger(__name__)

_MAIN: Final = "kafka.Kafka"
_STORAGE_TOOL: Final = "kafka.tools.StorageTool"
_STATE: Final = "broker.json"
_POLL_S: Final = 0.1
_LOG_TAIL_LINES: Final = 30


class KafkaBroker:
    """One combined broker and controller (on 127.0.0.1 by default), as a child JVM.

    Args:
        root: Holds ``broker.json``, the configuration, data and logs. Created
            if missing.
        heap: The JVM's ``-Xmx`` (default ``512m``).
        detached: Start the JVM in its own session so it outlives this process
            (stop it later with ``KafkaBroker.attach(root).stop()``).
        start_timeout_s: How long :meth:`start` waits for readiness (formatting
            included; default 120 s: two loaded cores start a JVM slowly).
        stop_timeout_s: Grace between SIGTERM and SIGKILL (default 20 s).
        home: The fetched Kafka (default: :meth:`KafkaHome.locate`).
        plan: Ports, cluster id, node id and voters of a first start (a node
            of a :class:`~sr3_cli.daemons.kafka_cluster.KafkaCluster`); default:
            free ports, a new cluster id, standalone. A ``broker.json`` wins.
        host: The address a first start listens on and advertises (a netns
            lab host's; default loopback). A ``broker.json`` wins.
        command_prefix: What starts the JVM there (``ip netns exec NS``;
            default: this namespace).
    """

    def __init__(  # noqa: PLR0913 (keyword-only options)
        self,
        root: Path,
        *,
        heap: str = "512m",
        detached: bool = False,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 20.0,
        home: KafkaHome | None = None,
        plan: BrokerInfo | None = None,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.root = Path(root).resolve()
        self.heap = heap
        self.detached = detached
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._home = home
        self.host = host
        self.command_prefix = tuple(command_prefix)
        self._info: BrokerInfo | None = self._load() or plan
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        where = self._info.bootstrap if self._info else "not started"
        return f"KafkaBroker({str(self.root)!r}, {where})"

    @classmethod
    def attach(cls, root: Path) -> KafkaBroker:
        """Rebuild a broker another process started from its ``broker.json``.

        Raises:
            KafkaBrokerError: ``root`` has no ``broker.json``.
        """
        broker = cls(root)
        if broker._info is None:
            msg = f"{broker.root} has no {_STATE}: no Kafka broker was started there"
            raise KafkaBrokerError(msg)
        return broker

    @property
    def home(self) -> KafkaHome:
        """The fetched Kafka this broker runs (located on first use)."""
        if self._home is None:
            self._home = KafkaHome.locate()
        return self._home

    @property
    def info(self) -> BrokerInfo:
        """Ports, cluster id and pid.

        Raises:
            KafkaBrokerError: never started.
        """
        if self._info is None:
            msg = f"Kafka broker in {self.root} was never started; call start()"
            raise KafkaBrokerError(msg)
        return self._info

    @property
    def bootstrap(self) -> str:
        """The bootstrap address clients use (``HOST:PORT``)."""
        return self.info.bootstrap

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs (None otherwise)."""
        info = self._info
        if info is None or info.pid is None or not self._is_ours(info.pid):
            return None
        return info.pid

    def running(self) -> bool:
        """Whether the broker's JVM runs."""
        return self.pid is not None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of ``logs/server.log`` and ``broker.out``."""
        out: list[str] = []
        for path in (self.root / "logs" / "server.log", self.root / "broker.out"):
            with contextlib.suppress(OSError):
                text = path.read_text(encoding="utf-8", errors="replace")
                out.extend(text.splitlines()[-lines:])
        return "\n".join(out)

    def start(self) -> str:
        """Format the storage (first start only), start the JVM, wait until ready.

        A restart keeps the ports, cluster id and data of the previous start.

        Returns:
            The bootstrap address.

        Raises:
            KafkaMissingError: the jars or java are missing.
            KafkaBrokerError: formatting failed, the JVM exited, or it did not
                answer a metadata request within ``start_timeout_s``.
        """
        if self.running():
            return self.bootstrap
        deadline = time.monotonic() + self.start_timeout_s
        self.launch(deadline)
        self.wait_ready(deadline)
        return self.bootstrap

    def launch(self, deadline: float) -> None:
        """Format the storage (first start only) and start the JVM; do not wait.

        A node of a multi-node cluster becomes ready only once a majority of
        the controllers runs, so a cluster launches every node first.

        Raises:
            KafkaMissingError: the jars or java are missing.
            KafkaBrokerError: formatting failed.
        """
        java = java_binary(self.home.version)
        self.root.mkdir(parents=True, exist_ok=True)
        info = self._info or BrokerInfo(
            free_port(), free_port(), new_cluster_id(), host=self.host
        )
        properties = self.root / "server.properties"
        properties.write_text(
            server_properties(info, self.root / "data"), encoding="utf-8"
        )
        if not (self.root / "data" / "meta.properties").is_file():
            self._format(java, info, properties, deadline)
        out = (self.root / "broker.out").open("ab")
        try:
            self._proc = subprocess.Popen(  # noqa: S603 (our java, our arguments)
                [*self.command_prefix, *self._jvm(java), _MAIN, str(properties)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.detached,
            )
        finally:
            out.close()
        self._info = replace(info, pid=self._proc.pid)
        self._save()

    def wait_ready(self, deadline: float) -> None:
        """Wait until the broker answers a metadata request (by ``deadline``).

        Raises:
            KafkaBrokerError: the JVM exited, or it did not answer in time.
        """
        self._wait_ready(deadline)
        logger.info("Kafka %s broker ready at %s", self.home.version, self.bootstrap)

    def stop(self) -> None:
        """SIGTERM the broker (a clean shutdown), SIGKILL it after the grace."""
        self._signal(signal.SIGTERM, self.stop_timeout_s)

    def kill(self) -> None:
        """SIGKILL the broker (a crash; :meth:`start` restarts it on its ports)."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, grace_s: float) -> None:
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + grace_s
            while self._gone(pid) is False and time.monotonic() < deadline:
                time.sleep(_POLL_S)  # polling a pid: there is nothing to wait on
            if not self._gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                while not self._gone(pid):
                    time.sleep(_POLL_S)  # the broker is not answering yet: poll
        if self._info is not None:
            self._info = replace(self._info, pid=None)
            self._save()

    def _gone(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is not None
        return not alive(pid)

    def _is_ours(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        argv = command_line(pid) or []
        return (
            alive(pid)
            and _MAIN in argv
            and str(self.root / "server.properties") in argv
        )

    def _jvm(self, java: str) -> list[str]:
        return [
            java,
            f"-Xmx{self.heap}",
            "-Xms64m",
            *LAB_JVM_FLAGS,  # a lab broker on shared cores: little CPU, small heap
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.root / 'logs'}",
            f"-Dlog4j2.configurationFile={self.home.root / 'config' / 'log4j2.xml'}",
            "-cp",
            self.home.classpath,
        ]

    def _format(
        self, java: str, info: BrokerInfo, properties: Path, deadline: float
    ) -> None:
        argv = [
            *self._jvm(java),
            _STORAGE_TOOL,
            "format",
            "--cluster-id",
            info.cluster_id,
            "--config",
            str(properties),
        ]
        if info.voters is None:
            argv.append("--standalone")  # a static quorum needs no flag
        try:
            done = subprocess.run(  # noqa: S603 (our java, our arguments)
                argv,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"formatting Kafka storage in {self.root / 'data'} timed out"
            raise KafkaBrokerError(msg) from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()[-2000:]
            msg = (
                f"kafka-storage format of {self.root / 'data'} failed "
                f"(exit {done.returncode}): {output}"
            )
            raise KafkaBrokerError(msg)

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 (only when started)

        proc = self._proc
        admin: AdminClient | None = None
        while True:
            if proc is not None and proc.poll() is not None:
                msg = (
                    f"Kafka broker in {self.root} exited with {proc.returncode} "
                    f"before it was ready; its log:\n{self.log_tail()}"
                )
                raise KafkaBrokerError(msg)
            if time.monotonic() > deadline:
                self.kill()
                msg = (
                    f"Kafka broker in {self.root} did not answer a metadata request "
                    f"within {self.start_timeout_s} s; its log:\n{self.log_tail()}"
                )
                raise KafkaBrokerError(msg)
            if admin is None and self._listening():
                config: dict[str, Any] = {
                    "bootstrap.servers": self.bootstrap,
                    "logger": logger,
                }
                admin = AdminClient(config)
            if admin is not None:
                with contextlib.suppress(Exception):  # not ready yet: retried
                    metadata = admin.list_topics(timeout=1.0)
                    if metadata.brokers:
                        return
            else:
                time.sleep(_POLL_S)  # the port is not even open: poll it again

    def _listening(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((self.info.host, self.info.port)) == 0

    def status(self) -> dict[str, Any]:
        """Return ``{"bootstrap", "pid", "running", "dir", "version", "node_id"}``."""
        info = self._info
        return {
            "bootstrap": info.bootstrap if info else None,
            "node_id": info.node_id if info else None,
            "pid": self.pid,
            "running": self.running(),
            "dir": str(self.root),
            "version": pinned_version(),
        }

    def _load(self) -> BrokerInfo | None:
        path = self.root / _STATE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            msg = f"{path} is unreadable ({exc}); delete it and start the broker again"
            raise KafkaBrokerError(msg) from exc
        return BrokerInfo(**raw)

    def _save(self) -> None:
        path = self.root / _STATE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.info)), encoding="utf-8")
        tmp.replace(path)
