"""A local lab: an embedded ZooKeeper and N ring node processes under one directory.

Layout of a lab dir::

    lab.json          ports, pids and data dirs (written by ``sr3 lab up``)
    secret            the ring's shared HMAC secret
    zk/               ZooKeeper's data dir and log
    nodes/<id>/       each node's data dir and node.log
    spark/            with ``sr3 lab up --spark``: a Spark standalone master and
                      worker (logs, work dir); lab.json's ``spark.master`` is its URL
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sr3.config import NodeConfig, Sr3Config, ZkConfig
from sr3.errors import ConfigError, SR3Error
from sr3_cli.processes import runs as _runs
from sr3_cli.processes import terminate as _terminate
from zk.launcher import EmbeddedZooKeeper, port_taken

if TYPE_CHECKING:
    from spark_bridge.standalone import StandaloneCluster

__all__ = ["Lab", "LabNode", "resolve_lab_dir"]

logger = logging.getLogger(__name__)

_STATE = "lab.json"
_NODE_READY_TIMEOUT_S = 30.0


E_CORRUPT_LAB = (
    "the lab's state file {path} cannot be read ({detail}). Processes it started "
    "may still run: `sr3 lab down --dir {root}` stops them; then move {path} "
    "away and run `sr3 lab up --dir {root}` (node data under {root}/nodes is kept "
    "and adopted)"
)


def _port(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**16:
        msg = f"zk_port {value!r} is not a TCP port"
        raise ValueError(msg)
    return value


def _pid(value: object) -> int | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value <= 0
    ):
        msg = f"pid {value!r} is not a process id"
        raise ValueError(msg)
    return value


def _optional_dict(value: object) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        msg = f"spark {value!r} is not an object"
        raise TypeError(msg)
    return value


def _nodes(raw: dict[str, Any]) -> dict[str, Any]:
    nodes = raw.get("nodes", {})
    if not isinstance(nodes, dict):
        msg = f"nodes {nodes!r} is not an object"
        raise TypeError(msg)
    return nodes


def _lab_node(node_id: str, raw: object) -> LabNode:
    if not isinstance(raw, dict):
        msg = f"node {node_id!r} is {raw!r}, not an object"
        raise TypeError(msg)
    node = LabNode(**raw)
    node.pid = _pid(node.pid)
    if node.port is not None:
        node.port = _port(node.port)
    if node.node_id != node_id or not isinstance(node.data_dir, str):
        msg = f"node {node_id!r} has id {node.node_id!r}, data dir {node.data_dir!r}"
        raise ValueError(msg)
    return node


def resolve_lab_dir(explicit: str | None) -> Path | None:
    """Return the lab dir from ``--lab`` or ``SR3_LAB``, or None."""
    raw = explicit or os.environ.get("SR3_LAB")
    return Path(raw).resolve() if raw else None


@dataclass
class LabNode:
    """One ring node of the lab."""

    node_id: str
    data_dir: str
    zone: str | None = None
    pid: int | None = None
    port: int | None = None

    @property
    def alive(self) -> bool:
        """Whether its process runs (a pid now another program's does not)."""
        return _runs(self.pid, Path(self.data_dir))


@dataclass
class Lab:
    """A lab directory and what runs in it."""

    root: Path
    zk_port: int = 0
    zk_pid: int | None = None
    chroot: str = "/sr3/default"
    nodes: dict[str, LabNode] = field(default_factory=dict)
    spark: dict[str, Any] | None = None

    @classmethod
    def load(cls, root: Path) -> Lab:
        """Read ``lab.json`` in ``root``.

        Raises:
            ConfigError: there is no lab there.
        """
        path = root / _STATE
        if not cls.exists(root):
            msg = f"no lab in {root}: run `sr3 lab up --dir {root}` first"
            raise ConfigError(msg)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                root=root,
                zk_port=_port(raw["zk_port"]),
                zk_pid=_pid(raw.get("zk_pid")),
                chroot=str(raw.get("chroot", "/sr3/default")),
                nodes={k: _lab_node(k, v) for k, v in _nodes(raw).items()},
                spark=_optional_dict(raw.get("spark")),
            )
        except (OSError, UnicodeError, ValueError, TypeError, KeyError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            msg = E_CORRUPT_LAB.format(path=path, root=root, detail=detail)
            raise ConfigError(msg) from exc

    @staticmethod
    def exists(root: Path) -> bool:
        """Whether ``root`` holds a lab (a ``lab.json``, readable or not)."""
        return os.path.lexists(root / _STATE)

    def save(self) -> None:
        """Write ``lab.json`` atomically."""
        raw = {
            "zk_port": self.zk_port,
            "zk_pid": self.zk_pid,
            "chroot": self.chroot,
            "nodes": {k: vars(v) for k, v in self.nodes.items()},
            "spark": self.spark,
        }
        tmp = self.root / (_STATE + ".tmp")
        tmp.write_text(json.dumps(raw, indent=2), encoding="utf-8")
        tmp.replace(self.root / _STATE)

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
        """Start the lab's ZooKeeper unless it runs already (same port on restart)."""
        if self.zookeeper_running:
            return
        if self.zk_port and port_taken(self.zk_port):
            # ZooKeeper keeps its data across ports; only `--zk` users must follow
            logger.warning(
                "the lab's ZooKeeper port %s is taken by another process; it "
                "listens on a new one (`--zk` users: see the address printed)",
                self.zk_port,
            )
            self.zk_port = 0
        zk = EmbeddedZooKeeper(self.root / "zk", port=self.zk_port, detached=True)
        zk.start()
        self.zk_port = zk.port
        self.zk_pid = zk.pid
        self.save()

    def stop_zookeeper(self) -> None:
        """Stop the lab's ZooKeeper."""
        if self.zookeeper_running:
            _terminate(self.zk_pid)
        self.zk_pid = None
        self.save()

    # --- Spark standalone cluster ----------------------------------------------

    def start_spark(self, *, cores: int = 2, memory: str = "2g") -> str:
        """Start the lab's Spark master and worker unless they run; return its URL.

        Raises:
            SR3Error: java or pyspark is missing, or a daemon did not start (the
                message quotes its log).
        """
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
        self.save()
        return info.master

    def stop_spark(self) -> None:
        """Stop the lab's Spark worker, master and executors, if any."""
        cluster = self._spark_cluster()
        if cluster is not None:
            cluster.stop()
        self.spark = None
        self.save()

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
        for _ in range(count):
            index = len(self.nodes) + 1
            node_id = f"node-{index}"
            zone = zones[(index - 1) % len(zones)] if zones else None
            data_dir = self.root / "nodes" / node_id
            self.nodes[node_id] = LabNode(
                node_id=node_id, data_dir=str(data_dir), zone=zone
            )
            added.append(node_id)
        self.save()
        return added

    def start_nodes(self, node_ids: list[str], *, log_level: str = "INFO") -> None:
        """Start the given nodes (those not running) and wait until each is ready.

        Raises:
            SR3Error: a node exited or did not become ready in time.
        """
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
        self.save()
        for node_id, proc in started.items():
            self._wait_ready(node_id, proc, offsets[node_id])
        self.save()

    def _wait_ready(
        self, node_id: str, proc: subprocess.Popen[bytes], log_offset: int
    ) -> None:
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
        self.nodes[node_id].port = int(line.split()[2])
        proc.stdout.close()

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

        Raises:
            ConfigError: a node id is not in the lab (then no node is signalled).
        """
        nodes = [self._node(node_id) for node_id in node_ids]
        signalled = []
        for node in nodes:
            if node.pid and node.alive:
                os.kill(node.pid, sig)
                signalled.append(node.node_id)
        self.save()
        return signalled

    def stop_nodes(self) -> None:
        """Stop every node gracefully."""
        for node in self.nodes.values():
            if node.alive:
                _terminate(node.pid)
            node.pid = None
        self.save()

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
