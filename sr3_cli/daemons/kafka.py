"""One Apache Kafka broker (KRaft, combined broker and controller) from fetched jars.

``scripts/fetch-jars.sh`` resolves the release ``jvm/kafka/pom.xml`` pins from
Maven Central into ``.cache/kafka-<version>/`` (``libs/`` is the broker's
classpath, ``config/log4j2.xml`` its logging). :class:`KafkaBroker` formats a
storage directory once (``kafka.tools.StorageTool format --standalone`` with a
generated cluster id) and runs ``kafka.Kafka server.properties`` on two free
loopback ports. Layout of the broker's root dir::

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

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

from sr3.errors import SR3Error
from sr3.net import free_port
from sr3_cli.processes import alive, command_line

__all__ = [
    "BrokerInfo",
    "KafkaBroker",
    "KafkaBrokerError",
    "KafkaHome",
    "KafkaMissingError",
    "new_cluster_id",
]

logger = logging.getLogger(__name__)

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
POM: Final = REPO_ROOT / "jvm" / "kafka" / "pom.xml"
_MAIN: Final = "kafka.Kafka"
_STORAGE_TOOL: Final = "kafka.tools.StorageTool"
_STATE: Final = "broker.json"
_POLL_S: Final = 0.1
_LOG_TAIL_LINES: Final = 30

E_NOT_FETCHED: Final = (
    "Apache Kafka {version} is not fetched: {missing} is missing. Run "
    "`scripts/fetch-jars.sh` (or `scripts/bootstrap.sh`), which resolves it from "
    "Maven Central into {home}"
)
E_NO_JAVA: Final = (
    "java not found ({where}): Apache Kafka {version} brokers need Java 17+; "
    "install it with `apt-get install openjdk-17-jre-headless` or set JAVA_HOME"
)


class KafkaBrokerError(SR3Error):
    """The Kafka broker did not start, stop, or is not this lab's."""


class KafkaMissingError(KafkaBrokerError):
    """Kafka's jars or Java, needed to run a broker, are missing."""


def pinned_version(pom: Path = POM) -> str:
    """Return the Kafka release ``jvm/kafka/pom.xml`` pins.

    Raises:
        KafkaMissingError: the pom is missing or has no ``<kafka.version>``.
    """
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {pom} ({exc}): it pins the Apache Kafka release"
        raise KafkaMissingError(msg) from exc
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", text)
    if match is None:
        msg = f"{pom} has no <kafka.version>; restore the property"
        raise KafkaMissingError(msg)
    return match.group(1)


@dataclass(frozen=True)
class KafkaHome:
    """A fetched Kafka: ``libs/`` (the classpath) and ``config/log4j2.xml``.

    Attributes:
        root: The directory (``.cache/kafka-<version>``).
        version: The Kafka release in it.
    """

    root: Path
    version: str

    @classmethod
    def locate(cls, cache_dir: Path | None = None) -> KafkaHome:
        """Return the fetched home of the pinned release, checked complete.

        Args:
            cache_dir: Where the fetch script writes (default ``SR3_CACHE_DIR``
                or ``<repo>/.cache``).

        Raises:
            KafkaMissingError: not fetched; the message names the missing jar
                and the command that fetches it.
        """
        version = pinned_version()
        cache = cache_dir or Path(
            os.environ.get("SR3_CACHE_DIR") or REPO_ROOT / ".cache"
        )
        root = (
            cache if cache.is_absolute() else REPO_ROOT / cache
        ) / f"kafka-{version}"
        for needed in (f"libs/kafka_2.13-{version}.jar", "config/log4j2.xml"):
            if not (root / needed).is_file():
                raise KafkaMissingError(
                    E_NOT_FETCHED.format(
                        version=version, missing=root / needed, home=root
                    )
                )
        return cls(root, version)

    @property
    def classpath(self) -> str:
        """The JVM classpath: every jar of ``libs/``."""
        return str(self.root / "libs" / "*")


def java_binary(version: str) -> str:
    """Return ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH.

    Raises:
        KafkaMissingError: that java does not exist.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        where = f"JAVA_HOME={home} has no executable bin/java"
        raise KafkaMissingError(E_NO_JAVA.format(where=where, version=version))
    found = shutil.which("java")
    if found is None:
        where = "JAVA_HOME is unset and `java` is not on PATH"
        raise KafkaMissingError(E_NO_JAVA.format(where=where, version=version))
    return found


def new_cluster_id() -> str:
    """Return a Kafka cluster id: 16 random bytes, base64url, no padding."""
    while True:
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not raw.startswith("-"):  # Kafka's Uuid avoids ids a CLI reads as flags
            return raw


@dataclass(frozen=True)
class BrokerInfo:
    """What ``broker.json`` records: enough to find, restart and stop the broker.

    Attributes:
        port: The PLAINTEXT listener clients use.
        controller_port: The KRaft controller listener.
        cluster_id: The id the storage was formatted with.
        pid: The broker JVM's pid (None once stopped).
        node_id: The KRaft ``node.id`` (1 for a single broker).
        voters: ``controller.quorum.voters`` of a multi-node cluster
            (``1@127.0.0.1:PORT,2@...``); None: a standalone single node.
    """

    port: int
    controller_port: int
    cluster_id: str
    pid: int | None = None
    node_id: int = 1
    voters: str | None = None

    @property
    def replicas(self) -> int:
        """How many nodes the cluster has (the voters; 1 standalone)."""
        return 1 if self.voters is None else self.voters.count(",") + 1

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"


class KafkaBroker:
    """One combined broker and controller on 127.0.0.1, as a child JVM.

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
    ) -> None:
        self.root = Path(root).resolve()
        self.heap = heap
        self.detached = detached
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._home = home
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
        """The bootstrap address clients use (``127.0.0.1:PORT``)."""
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
        info = self._info or BrokerInfo(free_port(), free_port(), new_cluster_id())
        properties = self.root / "server.properties"
        properties.write_text(self._properties(info), encoding="utf-8")
        if not (self.root / "data" / "meta.properties").is_file():
            self._format(java, info, properties, deadline)
        out = (self.root / "broker.out").open("ab")
        try:
            self._proc = subprocess.Popen(  # noqa: S603 (our java, our arguments)
                [*self._jvm(java), _MAIN, str(properties)],
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
            # a lab broker on shared cores: quick start, little CPU, small heap
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.root / 'logs'}",
            f"-Dlog4j2.configurationFile={self.home.root / 'config' / 'log4j2.xml'}",
            "-cp",
            self.home.classpath,
        ]

    def _properties(self, info: BrokerInfo) -> str:
        # a cluster of 3 keeps every internal topic on all nodes and needs 2 in
        # sync: one node may die without stopping transactions or commits
        replicas = info.replicas
        min_isr = 2 if replicas >= 3 else 1
        quorum = (
            {
                "controller.quorum.voters": info.voters,
                # the controller fences a dead broker (and moves its partition
                # leaders) after 3 s without heartbeats, not Kafka's 9 s
                "broker.session.timeout.ms": 3000,
                "broker.heartbeat.interval.ms": 500,
            }
            if info.voters
            else {
                "controller.quorum.bootstrap.servers": (
                    f"127.0.0.1:{info.controller_port}"
                )
            }
        )
        settings: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": info.node_id,
            **quorum,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{info.port},"
                f"CONTROLLER://127.0.0.1:{info.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{info.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "log.dirs": self.root / "data",
            "num.partitions": 1,
            # a missing topic is an error a user should see, not a silent create
            "auto.create.topics.enable": "false",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": 0,
            "log.retention.check.interval.ms": 5000,
        }
        lines = ["# Written by sr3_cli.daemons.kafka; rewritten at every start."]
        lines += [f"{key}={value}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

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
            return sock.connect_ex(("127.0.0.1", self.info.port)) == 0

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
