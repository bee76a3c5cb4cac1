"""A local lab: an embedded ZooKeeper and N ring node processes under one directory.

Layout of a lab dir::

    lab.json          ports, pids and data dirs (written by ``sr3 lab up``)
    lab.lock          held (``flock``) by whatever changes lab.json; holds its pid
    secret            the ring's shared HMAC secret
    zk/               ZooKeeper's data dir and log
    nodes/<id>/       each node's data dir and node.log
    spark/            with ``sr3 lab up --spark``: a Spark standalone master and
                      worker (logs, work dir); lab.json's ``spark.master`` is its URL
    storm/            with ``sr3 lab up --storm``: a real Apache Storm cluster (Nimbus,
                      supervisors, their workers; :mod:`sr3_cli.lab_storm`);
                      lab.json's ``storm.nimbus`` is Nimbus's Thrift address
    kafka/            with ``sr3 lab up --kafka``: an Apache Kafka KRaft broker (data,
                      logs; :mod:`sr3_cli.lab_kafka`); lab.json's ``kafka.bootstrap``
                      is its address

lab.json is changed only by read-modify-write of the current file under the
lab's lock (:meth:`Lab.locked`, :meth:`Lab.update`), so commands running at once
(``sr3 run --kill-node`` and ``sr3 lab restart``, two restarts) never undo each
other's changes. Every daemon the lab starts runs in a session of its own with a
path under the lab dir among its arguments or as its working directory, so
``sr3 lab down`` finds it even when lab.json is stale or gone
(:func:`sr3_cli.processes.lab_processes`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sr3.config import NodeConfig, Sr3Config, ZkConfig
from sr3.errors import ConfigError, SR3Error
from sr3_cli.labfile import (
    LabNode,
    lab_nodes,
    optional_object,
    pid_value,
    port_value,
    write_atomically,
)
from sr3_cli.lockfile import exclusive
from sr3_cli.processes import lab_processes, stop_processes
from sr3_cli.processes import runs as _runs
from sr3_cli.processes import terminate as _terminate
from zk.launcher import EmbeddedZooKeeper, port_taken

if TYPE_CHECKING:
    from spark_bridge.standalone import StandaloneCluster

__all__ = ["Lab", "LabNode", "resolve_lab_dir"]

logger = logging.getLogger(__name__)

_STATE = "lab.json"
_LOCK = "lab.lock"
_NODE_READY_TIMEOUT_S = 30.0
#: How long a command waits for another to release the lab's lock: longer than
#: the slowest change (ZooKeeper, nodes and Spark starting, each with a deadline).
LOCK_TIMEOUT_S = 300.0
#: Optional sections of lab.json, each an object or null, read and written as
#: they are (a field of :class:`Lab` of the same name holds each).
_SECTIONS = ("spark", "storm", "kafka")
_KNOWN_KEYS = frozenset({"zk_port", "zk_pid", "chroot", "nodes", *_SECTIONS})


E_NO_LAB = "no lab in {root}: run `sr3 lab up --dir {root}` first"
E_OVERWRITE = (
    "refusing to overwrite the lab's state file {path} with a copy read earlier "
    "(it would undo what other commands changed since); change a lab inside "
    "`with lab.locked():` or `with Lab.update(root) as lab:`"
)
E_LOCK_DIR = (
    "cannot lock the lab in {root} ({exc}); give `--dir` a directory you can write"
)
E_CORRUPT_LAB = (
    "the lab's state file {path} cannot be read ({detail}). Processes it started "
    "may still run: `sr3 lab down --dir {root}` stops them; then move {path} "
    "away and run `sr3 lab up --dir {root}` (node data under {root}/nodes is kept "
    "and adopted)"
)


def resolve_lab_dir(explicit: str | None) -> Path | None:
    """Return the lab dir from ``--lab`` or ``SR3_LAB``, or None."""
    raw = explicit or os.environ.get("SR3_LAB")
    return Path(raw).resolve() if raw else None


@dataclass
class Lab:
    """A lab directory and what runs in it.

    Methods that change what runs (``start_*``, ``stop_*``, ``add_nodes``) hold
    the lab's lock and first re-read lab.json, so an object loaded long ago (by
    a run that lasts minutes) never writes back what it read then.
    """

    root: Path
    zk_port: int = 0
    zk_pid: int | None = None
    chroot: str = "/sr3/default"
    nodes: dict[str, LabNode] = field(default_factory=dict)
    spark: dict[str, Any] | None = None
    storm: dict[str, Any] | None = None
    kafka: dict[str, Any] | None = None
    #: top-level keys of lab.json this version does not know, written back as read
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock_depth: int = field(default=0, init=False, repr=False, compare=False)
    _on_disk: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, root: Path) -> Lab:
        """Read ``lab.json`` in ``root`` (to look at; change it with :meth:`update`).

        Raises:
            ConfigError: there is no lab there, or its lab.json cannot be read.
        """
        path = root / _STATE
        if not cls.exists(root):
            raise ConfigError(E_NO_LAB.format(root=root))
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                msg = f"{type(raw).__name__} {raw!r} is not an object"
                raise TypeError(msg)
            lab = cls(
                root=root,
                zk_port=port_value(raw["zk_port"]),
                zk_pid=pid_value(raw.get("zk_pid")),
                chroot=str(raw.get("chroot", "/sr3/default")),
                nodes=lab_nodes(raw),
                extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
            )
            for name in _SECTIONS:
                setattr(lab, name, optional_object(name, raw.get(name)))
        except (OSError, UnicodeError, ValueError, TypeError, KeyError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            msg = E_CORRUPT_LAB.format(path=path, root=root, detail=detail)
            raise ConfigError(msg) from exc
        lab._on_disk = True
        return lab

    @staticmethod
    def exists(root: Path) -> bool:
        """Whether ``root`` holds a lab (a ``lab.json``, readable or not)."""
        return os.path.lexists(root / _STATE)

    @classmethod
    @contextmanager
    def update(
        cls, root: Path, *, create: bool = False, timeout_s: float = LOCK_TIMEOUT_S
    ) -> Iterator[Lab]:
        """Lock the lab, load the current lab.json, yield it, and save it on exit.

        Args:
            root: The lab dir.
            create: Write a new empty lab when there is none (else refuse).
            timeout_s: How long to wait for another command's lock.

        Raises:
            ConfigError: there is no lab (``create`` unset) or its lab.json
                cannot be read; the dir cannot be written.
            LockTimeoutError: another command held the lock for ``timeout_s``.
        """
        lab = cls(root=root)
        if not root.is_dir():
            raise ConfigError(E_NO_LAB.format(root=root))
        with lab.locked(timeout_s=timeout_s):
            if not lab._on_disk:
                if not create:
                    raise ConfigError(E_NO_LAB.format(root=root))
                lab.save()
            yield lab

    @contextmanager
    def locked(self, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[Lab]:
        """Hold the lab's lock; refresh this object from lab.json; save it on exit.

        Re-entrant: only the outermost block locks, re-reads and saves. The save
        happens on errors too, as what was started then runs. Without a lab dir
        (deleted under a running lab) nothing is locked, read or written, so
        processes this object knows can still be stopped.

        Raises:
            ConfigError: lab.json cannot be read, or the lock file not created.
            LockTimeoutError: another command held the lock for ``timeout_s``.
        """
        if self._lock_depth or not self.root.is_dir():
            self._lock_depth += 1
            try:
                yield self
            finally:
                self._lock_depth -= 1
            return
        with ExitStack() as stack:
            try:
                stack.enter_context(exclusive(self.root / _LOCK, timeout_s=timeout_s))
            except OSError as exc:
                msg = E_LOCK_DIR.format(root=self.root, exc=exc)
                raise ConfigError(msg) from exc
            self._on_disk = self.exists(self.root)
            if self._on_disk:
                self._refresh()
            self._lock_depth = 1
            try:
                yield self
            finally:
                self._lock_depth = 0
                if self._on_disk:
                    self._write()

    def _refresh(self) -> None:
        fresh = Lab.load(self.root)
        self.zk_port, self.zk_pid, self.chroot = (
            fresh.zk_port,
            fresh.zk_pid,
            fresh.chroot,
        )
        self.nodes, self.extra = fresh.nodes, fresh.extra
        for name in _SECTIONS:
            setattr(self, name, getattr(fresh, name))

    def save(self) -> None:
        """Write ``lab.json`` atomically, under the lab's lock.

        Inside :meth:`locked` it writes what was read there and changed since;
        outside, it only creates a new lab.

        Raises:
            ConfigError: outside :meth:`locked`, the lab already has a lab.json
                (writing a copy read earlier would undo other commands' changes).
        """
        if self._lock_depth or not self.root.is_dir():
            self._on_disk = True
            self._write()  # without a dir: FileNotFoundError naming the path
            return
        with self.locked():
            if self._on_disk:
                raise ConfigError(E_OVERWRITE.format(path=self.root / _STATE))
            self._on_disk = True

    def _write(self) -> None:
        # temp file + fsync + rename: a reader sees the old file or the new one
        raw: dict[str, Any] = {
            **self.extra,
            "zk_port": self.zk_port,
            "zk_pid": self.zk_pid,
            "chroot": self.chroot,
            "nodes": {k: vars(v) for k, v in self.nodes.items()},
        }
        raw.update({name: getattr(self, name) for name in _SECTIONS})
        write_atomically(self.root / _STATE, json.dumps(raw, indent=2))

    def _checkpoint(self) -> None:
        """Record progress now (pids of processes just started), inside locked()."""
        if self._lock_depth and self._on_disk:
            self._write()

    @property
    def zookeeper_running(self) -> bool:
        """Whether the lab's ZooKeeper process runs (not another on its pid)."""
        return _runs(self.zk_pid, self.root / "zk" / "zoo.cfg")

    @property
    def zk_hosts(self) -> str:
        """Client connect string of the lab's ZooKeeper."""
        return f"127.0.0.1:{self.zk_port}"

    @property
    def secret_file(self) -> Path:
        """The ring's shared secret."""
        return self.root / "secret"

    def secret(self) -> str:
        """Return the shared secret, creating it on first use.

        Raises:
            ConfigError: the secret file is empty or unreadable.
        """
        try:
            if not self.secret_file.exists():
                self.root.mkdir(parents=True, exist_ok=True)
                self.secret_file.write_text(secrets.token_hex(32), encoding="utf-8")
                self.secret_file.chmod(0o600)
            secret = self.secret_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeError) as exc:
            msg = f"cannot read the lab's secret file {self.secret_file}: {exc}"
            raise ConfigError(msg) from exc
        if not secret:
            msg = (
                f"the lab's secret file {self.secret_file} is empty; delete it and "
                "run `sr3 lab up` again, which writes a new one (stored replicas "
                "stay readable: the secret only authenticates connections)"
            )
            raise ConfigError(msg)
        return secret

    def config(self, base: Sr3Config | None = None) -> Sr3Config:
        """Return ``base`` pointed at this lab's ZooKeeper and secret."""
        cfg = base or Sr3Config()
        return Sr3Config(
            ring=cfg.ring,
            node=NodeConfig(
                secret=self.secret(),
                max_frame_bytes=cfg.node.max_frame_bytes,
                io_timeout_s=cfg.node.io_timeout_s,
                connect_timeout_s=cfg.node.connect_timeout_s,
                chunk_bytes=cfg.node.chunk_bytes,
            ),
            zk=ZkConfig(
                hosts=self.zk_hosts,
                chroot=self.chroot,
                session_timeout_s=cfg.zk.session_timeout_s,
                connect_timeout_s=cfg.zk.connect_timeout_s,
                digest=cfg.zk.digest,
            ),
            repair=cfg.repair,
            recovery=cfg.recovery,
        )

    # --- ZooKeeper -------------------------------------------------------------

    def start_zookeeper(self) -> None:
        """Start the lab's ZooKeeper unless it runs already (same port on restart).

        One that runs from the lab's zk dir but is missing from lab.json (a
        stale copy written back by hand) is adopted, not started twice.

        Raises:
            ZooKeeperMissingError: java or ZooKeeper is not installed.
            CoordinationError: it did not start (the message quotes its log).
        """
        with self.locked():
            self._start_zookeeper()

    def _start_zookeeper(self) -> None:
        if self.zookeeper_running:
            return
        zk_dir = self.root / "zk"
        running = EmbeddedZooKeeper.detached_pid(zk_dir)
        hosts = EmbeddedZooKeeper.detached_hosts(zk_dir)
        if running is not None and hosts is not None:
            logger.warning(
                "lab.json did not list the lab's running ZooKeeper (pid %s); "
                "adopting it",
                running,
            )
            self.zk_pid, self.zk_port = running, int(hosts.rsplit(":", 1)[1])
            return
        if self.zk_port and port_taken(self.zk_port):
            # ZooKeeper keeps its data across ports; only `--zk` users must follow
            logger.warning(
                "the lab's ZooKeeper port %s is taken by another process; it "
                "listens on a new one (`--zk` users: see the address printed)",
                self.zk_port,
            )
            self.zk_port = 0
        zk = EmbeddedZooKeeper(zk_dir, port=self.zk_port, detached=True)
        zk.start()
        self.zk_port = zk.port
        self.zk_pid = zk.pid

    def stop_zookeeper(self) -> None:
        """Stop the lab's ZooKeeper."""
        with self.locked():
            if self.zookeeper_running:
                _terminate(self.zk_pid)
            self.zk_pid = None

    # --- Spark standalone cluster ----------------------------------------------

    def start_spark(self, *, cores: int = 2, memory: str = "2g") -> str:
        """Start the lab's Spark master and worker unless they run; return its URL.

        Raises:
            SR3Error: java or pyspark is missing, or a daemon did not start (the
                message quotes its log).
        """
        with self.locked():
            return self._start_spark(cores=cores, memory=memory)

    def _start_spark(self, *, cores: int, memory: str) -> str:
        from spark_bridge.standalone import StandaloneCluster  # noqa: PLC0415 (pyspark only when asked)

        running = self._spark_cluster()
        if running is not None:
            if running.master_pid is not None and running.worker_pid is not None:
                return running.url
            running.stop()
        cluster = StandaloneCluster(
            self.root / "spark", cores=cores, memory=memory, detached=True
        ).start()
        info = cluster.info
        self.spark = {
            "master": info.master,
            "master_webui": info.master_webui,
            "master_pid": info.master_pid,
            "worker_pid": info.worker_pid,
            "cores": cores,
            "memory": memory,
            "dir": str(cluster.root),
        }
        return info.master

    def stop_spark(self) -> None:
        """Stop the lab's Spark worker, master and executors, if any."""
        with self.locked():
            cluster = self._spark_cluster()
            if cluster is not None:
                cluster.stop()
            self.spark = None

    def stop_storm(self) -> None:
        """Stop the lab's Storm supervisors, their workers and Nimbus, if any."""
        from sr3_cli.lab_storm import stop_storm  # noqa: PLC0415 (it imports this module)

        stop_storm(self)

    def stop_kafka(self) -> None:
        """Stop the lab's Kafka broker, if any."""
        from sr3_cli.lab_kafka import stop_kafka  # noqa: PLC0415 (it imports this module)

        stop_kafka(self)

    def _spark_cluster(self) -> StandaloneCluster | None:
        if self.spark is None:
            return None
        from spark_bridge.standalone import (  # noqa: PLC0415 (pyspark only when asked)
            StandaloneCluster,
            StandaloneClusterError,
        )

        try:
            return StandaloneCluster.attach(Path(self.spark["dir"]))
        except StandaloneClusterError:
            return None

    # --- nodes -----------------------------------------------------------------

    def add_nodes(self, count: int, zones: list[str] | None = None) -> list[str]:
        """Define ``count`` more nodes (not started) and return their ids."""
        added = []
        with self.locked():
            for _ in range(count):
                index = len(self.nodes) + 1
                node_id = f"node-{index}"
                zone = zones[(index - 1) % len(zones)] if zones else None
                data_dir = self.root / "nodes" / node_id
                self.nodes[node_id] = LabNode(
                    node_id=node_id, data_dir=str(data_dir), zone=zone
                )
                added.append(node_id)
        return added

    def start_nodes(self, node_ids: list[str], *, log_level: str = "INFO") -> None:
        """Start the given nodes (those not running) and wait until each is ready.

        The lab is locked while the nodes are spawned and their pids recorded;
        a second command starting the same nodes then finds them running. It
        is not locked while they come up (inside a command that holds the lock
        it stays locked): a node waiting for a ZooKeeper that is restarting must
        not keep the command restarting ZooKeeper from taking the lock.

        Raises:
            SR3Error: a node exited or did not become ready in time.
        """
        if self._lock_depth:
            self._start_nodes(node_ids, log_level=log_level)
            return
        with self.locked():
            started, offsets = self._spawn_nodes(node_ids, log_level=log_level)
        ports = {n: self._wait_ready(n, p, offsets[n]) for n, p in started.items()}
        with self.locked():
            for node_id, port in ports.items():
                node = self.nodes.get(node_id)
                if node is not None and node.pid == started[node_id].pid:
                    node.port = port

    def _start_nodes(self, node_ids: list[str], *, log_level: str) -> None:
        started, offsets = self._spawn_nodes(node_ids, log_level=log_level)
        for node_id, proc in started.items():
            self.nodes[node_id].port = self._wait_ready(node_id, proc, offsets[node_id])

    def _spawn_nodes(
        self, node_ids: list[str], *, log_level: str
    ) -> tuple[dict[str, subprocess.Popen[bytes]], dict[str, int]]:
        """Start the nodes not running; return their processes and log offsets."""
        self.check_nodes(node_ids)
        self.secret()  # created before any node reads it
        started: dict[str, subprocess.Popen[bytes]] = {}
        offsets: dict[str, int] = {}  # where each node's log of this start begins
        for node_id in node_ids:
            node = self._node(node_id)
            if node.alive:
                continue
            try:
                Path(node.data_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                msg = (
                    f"cannot use {node_id}'s data dir {node.data_dir}: {exc}; move "
                    "whatever is there away (the node starts empty and repair "
                    "copies its replicas back)"
                )
                raise ConfigError(msg) from exc
            if node.port and port_taken(node.port):
                logger.warning(
                    "ring node %s's port %s is taken by another process; it "
                    "listens on a new one",
                    node_id,
                    node.port,
                )
                node.port = None
            cmd = [
                sys.executable, "-m", "sr3_cli", "--log-level", log_level,
                "node", "--zk", self.zk_hosts, "--chroot", self.chroot,
                "--port", str(node.port or 0), "--data-dir", node.data_dir,
                "--node-id", node_id, "--secret-file", str(self.secret_file),
            ]  # fmt: skip
            if node.zone:
                cmd += ["--zone", node.zone]
            log = open(Path(node.data_dir) / "node.log", "ab")  # noqa: SIM115
            offsets[node_id] = log.tell()
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            log.close()
            node.pid = proc.pid
            started[node_id] = proc
        self._checkpoint()  # their pids, should this command die while they start
        return started, offsets

    def _wait_ready(
        self, node_id: str, proc: subprocess.Popen[bytes], log_offset: int
    ) -> int:
        """Wait for a started node's READY line; return the port it listens on."""
        if proc.stdout is None:
            msg = f"ring node {node_id} was started without a stdout pipe"
            raise SR3Error(msg)
        deadline = time.monotonic() + _NODE_READY_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or line.startswith(b"READY"):
                break
        if not line.startswith(b"READY"):
            raise SR3Error(self._not_started(node_id, log_offset))
        proc.stdout.close()
        return int(line.split()[2])

    def _not_started(self, node_id: str, log_offset: int) -> str:
        """Say why a node did not start: its error line, else its log's tail."""
        log = Path(self.nodes[node_id].data_dir) / "node.log"
        try:
            with log.open("rb") as f:
                f.seek(log_offset)
                text = f.read().decode("utf-8", errors="replace")
        except OSError as exc:
            text = f"(its log cannot be read: {exc})"
        errors = [ln for ln in text.splitlines() if ln.startswith("sr3: error: ")]
        if errors:
            reason = errors[-1].removeprefix("sr3: error: ")
            return f"ring node {node_id} did not start: {reason} (log: {log})"
        return f"ring node {node_id} did not start (see {log}):\n{text[-2000:]}"

    def kill_nodes(self, node_ids: list[str], sig: int = signal.SIGKILL) -> list[str]:
        """Send ``sig`` (SIGKILL by default) to the given nodes; return those running.

        The pids come from lab.json as it is now (a node restarted since this
        object was loaded has a new one); nothing is written.

        Raises:
            ConfigError: a node id is not in the lab (then no node is signalled),
                or lab.json cannot be read.
        """
        current = Lab.load(self.root) if self.exists(self.root) else self
        current.check_nodes(node_ids)
        nodes = [current.nodes[node_id] for node_id in node_ids]
        signalled = []
        for node in nodes:
            if node.pid and node.alive:
                os.kill(node.pid, sig)
                signalled.append(node.node_id)
        return signalled

    def stop_nodes(self) -> None:
        """Stop every node gracefully."""
        with self.locked():
            for node in self.nodes.values():
                if node.alive:
                    _terminate(node.pid)
                node.pid = None

    def stop(self) -> list[int]:
        """Stop everything the lab started; return the pids lab.json did not list.

        Storm (workers included), Spark, the nodes and ZooKeeper as lab.json
        lists them stop first (gracefully, in that order); then every other
        process still running from the lab dir (lab.json stale or edited) gets
        SIGTERM, then SIGKILL.

        Raises:
            ConfigError: lab.json cannot be read (:func:`lab_processes` still
                finds what runs).
        """
        with self.locked():
            self.stop_storm()
            self.stop_spark()
            self.stop_kafka()
            self.stop_nodes()
            self.stop_zookeeper()
            leftovers = lab_processes(self.root)
            stop_processes(leftovers)
        return leftovers

    def check_nodes(self, node_ids: list[str]) -> None:
        """Check that every id names a node of this lab.

        Raises:
            ConfigError: the first id that does not.
        """
        for node_id in node_ids:
            self._node(node_id)

    def _node(self, node_id: str) -> LabNode:
        if node_id not in self.nodes:
            known = ", ".join(sorted(self.nodes)) or "none"
            msg = f"no node {node_id!r} in the lab at {self.root} (nodes: {known})"
            raise ConfigError(msg)
        return self.nodes[node_id]
