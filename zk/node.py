"""The ring node process: storage server, ZooKeeper membership, election and repair.

``sr3 node`` runs :func:`run_node` in the foreground. The node's id is kept in its
data dir, so a node restarted on the same dir rejoins as itself and the repair
coordinator adopts its intact replicas instead of copying them again.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import secrets
import signal
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sr3.client import ClientPool
from sr3.config import Sr3Config
from sr3.errors import (
    AuthenticationError,
    ConfigError,
    CoordinationError,
    StorageError,
)
from sr3.metrics import NodeMetrics
from sr3.metrics_serving import Endpoint, serve
from sr3.ports import NodeInfo
from sr3.recovery import RelayFaults, RelayOps
from sr3.repair import RepairCoordinator
from sr3.scrubber import Scrubber
from sr3.server import NodeServer, announce_ready
from sr3.storage import ReplicaStore
from zk.client import connect
from zk.election import ZkElection
from zk.manifests import ZkManifestStore
from zk.membership import ZkMembership

__all__ = ["NodeOptions", "load_node_id", "lock_data_dir", "run_node"]

logger = logging.getLogger(__name__)

_NODE_ID_FILE = "node_id"
_LOCK_FILE = "lock"
_NODE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: Test-only relay fault injection, as ``delay_s=0.01,abort_after_frames=20``.
RELAY_FAULTS_ENV = "SR3_TEST_RELAY_FAULTS"
#: How long a start waits to tell whether a namesake's address still answers.
_PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class NodeOptions:
    """How to run one ring node.

    Attributes:
        data_dir: Where replicas and the node id live.
        host: Address to bind and announce (default 127.0.0.1).
        port: TCP port; 0 picks a free one (the real port is announced).
        zone: Failure zone label.
        node_id: Id to use on first start; later starts must match the stored id.
        capacity: Relative weight on the ring.
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    zone: str | None = None
    node_id: str | None = None
    capacity: int = 1


E_DATA_DIR = (
    "cannot use --data-dir {data_dir}: {exc}; give the node a directory it can "
    "create and write (check its owner, mode and free space)"
)
E_DATA_DIR_IN_USE = (
    "--data-dir {data_dir} is in use by another ring node (pid {pid}); stop that "
    "node first, or give this one its own --data-dir"
)
E_AUTH_REFUSED = (
    "ring node {other} at {address} refused the secret of node {node}, so it "
    "could hold no replica; give this node the ring's secret: --secret-file "
    "FILE (a lab keeps it in LAB_DIR/secret) or SR3_NODE_SECRET"
)
E_REPLICA_DIRS = (
    "{exc}: {data_dir}/replicas and {data_dir}/quarantine must be directories this "
    "node can write; move whatever else is there away (a node started without its "
    "replicas gets them back from repair)"
)
E_STORED_ID = (
    "{path} holds {stored!r}, not a node id (letters, digits, '.', '_' or '-', "
    "at most 64): it is damaged. Write the node's id into it (as `sr3 status` "
    "listed it), or move the data dir away to start a new node"
)


def _read_stored_id(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(256)  # an id has at most 64 characters
    stored = head.decode("utf-8", errors="replace").strip()
    if not _NODE_ID_RE.fullmatch(stored):
        msg = E_STORED_ID.format(path=path, stored=stored)
        raise ConfigError(msg)
    return stored


def load_node_id(data_dir: Path, requested: str | None) -> str:
    """Return the node id stored in ``data_dir``, creating it on first start.

    Raises:
        ConfigError: the requested id is malformed or differs from the stored
            one, the stored one is damaged, or the data dir cannot be written.
    """
    try:
        return _load_node_id(data_dir, requested)
    except OSError as exc:
        msg = E_DATA_DIR.format(data_dir=data_dir, exc=exc)
        raise ConfigError(msg) from exc


def _load_node_id(data_dir: Path, requested: str | None) -> str:
    path = data_dir / _NODE_ID_FILE
    if path.exists():
        stored = _read_stored_id(path)
        if requested is not None and requested != stored:
            msg = (
                f"data dir {data_dir} belongs to node {stored!r}, not {requested!r}; "
                "pass the matching --node-id or use another --data-dir"
            )
            raise ConfigError(msg)
        return stored
    node_id = requested or f"node-{secrets.token_hex(4)}"
    if not _NODE_ID_RE.fullmatch(node_id):
        msg = f"node id {node_id!r} is invalid; use letters, digits, '.', '_' or '-'"
        raise ConfigError(msg)
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(node_id + "\n", encoding="utf-8")
    tmp.replace(path)
    return node_id


def run_node(config: Sr3Config, options: NodeOptions) -> None:
    """Serve until SIGTERM or SIGINT: store replicas, stay registered, repair.

    Raises:
        ConfigError: bad options.
        CoordinationError: ZooKeeper could not be reached.
    """
    node_id = load_node_id(options.data_dir, options.node_id)
    lock = lock_data_dir(options.data_dir)
    try:
        try:
            store = ReplicaStore(options.data_dir)
        except StorageError as exc:
            msg = E_REPLICA_DIRS.format(exc=exc, data_dir=options.data_dir)
            raise ConfigError(msg) from exc
        faults = RelayFaults.parse(os.environ.get(RELAY_FAULTS_ENV, ""))
        asyncio.run(_serve(config, options, node_id, store, faults))
    finally:
        os.close(lock)  # releases the lock


def lock_data_dir(data_dir: Path) -> int:
    """Lock ``data_dir`` for this process; return the descriptor that holds it.

    A second node on the same dir would remove the first one's in-flight temp
    files and quarantine replicas under it at its start-up scan, so it is
    refused before it reads anything. The lock (``flock`` on ``data_dir/lock``)
    goes with the process, however it ends; the file keeps the holder's pid.

    Raises:
        ConfigError: another process holds the lock, or it cannot be taken.
    """
    path = data_dir / _LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        msg = E_DATA_DIR.format(data_dir=data_dir, exc=exc)
        raise ConfigError(msg) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
        os.close(fd)
        if not isinstance(exc, BlockingIOError):
            msg = E_DATA_DIR.format(data_dir=data_dir, exc=exc)
            raise ConfigError(msg) from exc
        msg = E_DATA_DIR_IN_USE.format(data_dir=data_dir, pid=holder or "unknown")
        raise ConfigError(msg) from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class _MemberAddresses:
    """Whether an address is a live ring member's: where ``pull`` may copy from.

    Answers from the addresses the membership watch last reported; one it does
    not know is looked up in ZooKeeper (the watch may lag behind a node that
    just joined). Before the node's membership is attached, no address is.
    """

    def __init__(self) -> None:
        self.membership: ZkMembership | None = None
        self._known: frozenset[tuple[str, int]] = frozenset()

    def update(self, members: Mapping[str, NodeInfo]) -> None:
        """Take the members a watch reported (quick: runs on kazoo's thread)."""
        self._known = frozenset((info.host, info.port) for info in members.values())

    def __call__(self, host: str, port: int) -> bool:
        if (host, port) in self._known:
            return True
        if self.membership is None:
            return False
        self.update(self.membership.members())
        return (host, port) in self._known


def _refuse_live_namesake(membership: ZkMembership, info: NodeInfo) -> None:
    """Refuse to start under an id a live node elsewhere is registered with.

    A registration at another address whose port still accepts connections is a
    second node given the same id (a copied data dir, a repeated --node-id):
    taking it over would knock that node out of the ring. One whose address no
    longer answers is this node's previous run, not yet expired: it is replaced.

    Raises:
        ConfigError: a live node at another address has this id.
    """
    other = membership.members().get(info.node_id)
    if other is None or (other.host, other.port) == (info.host, info.port):
        return
    try:
        with socket.create_connection((other.host, other.port), _PROBE_TIMEOUT_S):
            pass
    except OSError:
        logger.info(
            "node id %s was registered at %s, which no longer answers: replacing it",
            info.node_id,
            other.address,
        )
        return
    msg = (
        f"node id {info.node_id!r} is registered by a live node at {other.address}; "
        "give each node its own --node-id and --data-dir (or stop that node first)"
    )
    raise ConfigError(msg)


def _refuse_foreign_secret(
    membership: ZkMembership, pool: ClientPool, node_id: str
) -> None:
    """Refuse to join a ring whose nodes refuse this node's secret.

    Such a node would hold no replica: every write and repair copy to it fails
    authentication, so the shards placed on it stay under-replicated while it
    looks alive. The first live member that answers decides; an empty ring or
    members that cannot be reached let the node start.

    Raises:
        ConfigError: a live member refused this node's secret.
    """
    for other_id, info in sorted(membership.members().items()):
        if other_id == node_id:
            continue
        try:
            with pool.client(info) as client:
                client.ping()
        except AuthenticationError as exc:
            msg = E_AUTH_REFUSED.format(
                node=node_id, other=other_id, address=info.address
            )
            raise ConfigError(msg) from exc
        except StorageError as exc:
            logger.info("secret check: %s did not answer: %s", other_id, exc)
            continue
        return


async def _serve(
    config: Sr3Config,
    options: NodeOptions,
    node_id: str,
    store: ReplicaStore,
    faults: RelayFaults,
) -> None:
    sources = _MemberAddresses()
    server = NodeServer(
        store,
        node_id=node_id,
        config=config.node,
        host=options.host,
        port=options.port,
        pull_sources=sources,
    )
    # star/line/tree recovery: line and tree relays, and the planner's probe
    RelayOps(store, faults=faults).install(server)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    session = await asyncio.to_thread(connect, config.zk)
    pool = ClientPool(config.node)
    info = NodeInfo(
        node_id=node_id,
        host=options.host,
        port=server.port,
        zone=options.zone,
        capacity=options.capacity,
    )
    membership = ZkMembership(session)
    sources.membership = membership
    election = ZkElection(session, node_id)
    metrics = NodeMetrics(
        node_id,
        shards=lambda: len(store),
        stored_bytes=store.total_bytes,
        is_leader=election.is_leader,
    )
    endpoint: Endpoint | None = None
    if config.metrics.enabled:
        endpoint = serve(metrics.registry, port=config.metrics.port, host=options.host)
    repair = RepairCoordinator(
        membership=membership,
        manifests=ZkManifestStore(session),
        pool=pool,
        ring_config=config.ring,
        repair_config=config.repair,
        election=election,
        on_pass=lambda report: metrics.repair_pass(
            under=report.under_replicated,
            lost=len(report.lost),
            copies=report.copied,
            copied_bytes=report.bytes_copied,
            seconds=report.seconds,
        ),
    )
    repair_thread = threading.Thread(target=repair.run, name="sr3-repair", daemon=True)
    scrubber = Scrubber(
        store,
        interval_s=config.repair.scrub_interval_s,
        on_quarantine=lambda _shard: repair.notify(),
    )
    scrub_thread = threading.Thread(target=scrubber.run, name="sr3-scrub", daemon=True)
    try:
        await asyncio.to_thread(_refuse_live_namesake, membership, info)
        await asyncio.to_thread(_refuse_foreign_secret, membership, pool, node_id)
        url = None if endpoint is None else endpoint.url
        await asyncio.to_thread(partial(membership.register, info, metrics_url=url))
        election.start()
        membership.watch(repair.notify)
        membership.watch(sources.update)
        repair_thread.start()
        if config.repair.scrub_interval_s > 0:
            scrub_thread.start()
        logger.info("node %s serving on %s (zone %s)", node_id, info.address, info.zone)
        if endpoint is not None:
            logger.info("node %s serves metrics at %s", node_id, endpoint.url)
        # the lab waits for this line on stdout
        announce_ready(f"READY {node_id} {server.port}")
        await stop.wait()
    finally:
        logger.info("node %s stopping", node_id)
        repair.stop()
        scrubber.stop()
        election.stop()
        if session.connected:
            try:
                await asyncio.to_thread(
                    partial(membership.unregister, node_id, leaving=True)
                )
            except CoordinationError as exc:
                logger.warning(
                    "node %s leaves the ring when its session expires: %s", node_id, exc
                )
        else:
            # retrying would hold the shutdown for the whole retry budget: the
            # member znode is ephemeral and goes when the session expires
            logger.warning(
                "ZooKeeper is unreachable: node %s leaves the ring when its session "
                "expires",
                node_id,
            )
        session.close()
        pool.close_all()
        if endpoint is not None:
            endpoint.close()
        await server.close()
