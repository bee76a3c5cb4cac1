"""The state backend's handles on ZooKeeper and the ring, for one process.

A Storm stateful task, a Spark driver or executor, and the CLI open a
:class:`RingAccess` from a conf mapping (``sr3.zk.hosts``, ``sr3.zk.chroot``; the
ring secret comes from ``sr3.node.secret`` or the ``SR3_NODE_SECRET``
environment variable) to read the committed epoch of a topology, restore an
owner's key groups through star, line or tree recovery, and write snapshots.
Reading a component's committed state back (:mod:`backend.committed`) and
collecting what a commit supersedes (:mod:`backend.collector`) are done by the
helpers it holds.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from backend.collector import ChainCollector
from backend.committed import CommittedReader, CommittedState
from backend.lazy import LAZY_FETCH, ChainLoader, LoadStats
from backend.owners import component_owners, owner_name
from backend.rescale import Route, candidate_owners, reshard
from backend.shard_cache import ShardCache
from sr3.client import ClientPool
from sr3.config import Sr3Config
from sr3.errors import RecoveryError
from sr3.manifest import Manifest
from sr3.recovery import Recoverer, RecoveryContext
from sr3.recovery.recover import shards_to_read
from sr3.replication import LiveMembers, ReplicatedStore
from sr3.snapshot import GcReport, SnapshotReader, SnapshotWriter, WriteReport
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord, ZkCheckpointStore
from zk.client import ZkSession, connect
from zk.manifests import ZkManifestStore
from zk.membership import ZkMembership
from zk.savepoints import ZkSavepointStore

__all__ = [
    "CommitRecord",
    "RestoreReport",
    "RingAccess",
    "config_from_conf",
]

logger = logging.getLogger(__name__)

#: How a restore fetched the shards when the star/line/tree recovery failed.
PLAIN_FETCH = "parallel-fetch"


def config_from_conf(conf: Mapping[str, Any]) -> Sr3Config:
    """Return the sr3 configuration in a Storm conf (``sr3.*`` keys).

    Keys of other subsystems (``sr3.checkpoint.interval.s``) are ignored here.
    The ring secret falls back to ``SR3_NODE_SECRET``.

    Raises:
        ConfigError: a known key has an invalid value.
    """
    config = Sr3Config.from_mapping(conf, strict=False)
    if not config.node.secret and os.environ.get("SR3_NODE_SECRET"):
        node = replace(config.node, secret=os.environ["SR3_NODE_SECRET"])
        config = replace(config, node=node)
    return config


@dataclass(frozen=True)
class RestoreReport:
    """What a task's restore read.

    Attributes:
        epoch: Committed epoch restored (None: nothing committed, empty state).
        mechanism: Configured ``sr3.recovery.mechanism``.
        used: Transfer structure actually used.
        shards: Shards fetched.
        bytes_read: Payload bytes fetched.
        seconds: Wall time of the fetch and install.
        reason: Why the structure was chosen (the planner's words).
        phases: The recovery's timeline (plan, transfer, install...).
        transfer: The structure a lazy restore's background load runs (star,
            line or tree; empty for an eager restore, whose ``used`` says it,
            and for a lazy one until its load is planned: the load's
            :class:`~backend.lazy.LoadStats` name it).
    """

    epoch: int | None
    mechanism: str
    used: str
    shards: int
    bytes_read: int
    seconds: float
    reason: str = ""
    phases: list[dict[str, Any]] = field(default_factory=list)
    transfer: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        return {
            "epoch": self.epoch,
            "mechanism": self.mechanism,
            "used": self.used,
            "shards": self.shards,
            "bytes": self.bytes_read,
            "seconds": round(self.seconds, 6),
            "reason": self.reason,
            "phases": self.phases,
            "transfer": self.transfer,
        }


class RingAccess:
    """Open handles on ZooKeeper and the ring for one process.

    Args:
        config: Where ZooKeeper is and how to reach the ring nodes.
        create: Create a missing chroot (writers); readers pass False, so a
            mistyped chroot is an error instead of a new empty cluster.
    """

    def __init__(self, config: Sr3Config, *, create: bool = True) -> None:
        self.config = config
        self.session: ZkSession = connect(config.zk, create=create)
        self.pool = ClientPool(config.node)
        self.membership = ZkMembership(self.session)
        self.members = LiveMembers(self.membership)
        self.store = ReplicatedStore(
            members=self.members, pool=self.pool, ring_config=config.ring
        )
        self.manifests = ZkManifestStore(self.session)
        self.checkpoints = ZkCheckpointStore(self.session)
        self.savepoints = ZkSavepointStore(self.session)
        self._writer = SnapshotWriter(
            store=self.store,
            manifests=self.manifests,
            max_shard_bytes=config.ring.max_shard_bytes,
        )
        self._reader = SnapshotReader(store=self.store, manifests=self.manifests)
        self._committed = CommittedReader(
            self.checkpoints, self._reader, config.zk.chroot
        )
        self._collector = ChainCollector(
            manifests=self.manifests,
            writer=self._writer,
            savepoints=self.savepoints,
            checkpoints=self.checkpoints,
        )

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> RingAccess | None:
        """Open from a Storm conf; None when ``sr3.zk.hosts`` is not set.

        Raises:
            ConfigError: a ``sr3.*`` value is invalid.
            CoordinationError: ZooKeeper is unreachable.
        """
        config = config_from_conf(conf)
        if not config.zk.hosts:
            return None
        return cls(config)

    def close(self) -> None:
        """Close the ring connections and the ZooKeeper session."""
        self.store.close()
        self.pool.close_all()
        self.membership.close()
        self.session.close()

    def committed(self, topology: str) -> CommitRecord | None:
        """Return the topology's last globally committed epoch.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        return self.checkpoints.committed(topology)

    def restore(
        self,
        owner: str,
        record: CommitRecord | None,
        *,
        key_group_count: int,
        mechanism: str,
    ) -> tuple[KeyedState, RestoreReport]:
        """Rebuild ``owner``'s keyed state of the committed epoch.

        The transfer goes through :mod:`sr3.recovery` with ``mechanism`` (star,
        line, tree or auto); should that fail, a plain parallel fetch from the
        shards' holders is tried, and the report says so. Manifests newer than
        the committed epoch (published before a failure, never committed) are
        ignored. Key groups stay encoded until touched when
        ``sr3.recovery.lazy.install`` is on.

        Raises:
            RecoveryError, ShardNotFoundError: the snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        started = time.perf_counter()
        if record is None or owner not in record.owners:
            empty = RestoreReport(None, mechanism, "none", 0, 0, 0.0)
            return KeyedState(key_group_count), empty
        lazy = self.config.recovery.lazy_install
        try:
            result = self._recoverer(mechanism).recover(
                owner, mechanism=mechanism, epoch=record.epoch, lazy=lazy
            )
        except RecoveryError as exc:
            logger.warning(
                "%s recovery of %s@%s failed (%s); fetching its shards directly",
                mechanism,
                owner,
                record.epoch,
                exc,
            )
        else:
            report = RestoreReport(
                record.epoch,
                mechanism,
                result.mechanism,
                result.shards,
                result.bytes_received,
                time.perf_counter() - started,
                reason=result.reason,
                phases=[span.to_dict() for span in result.timeline],
            )
            return result.state, report
        manifest = self._reader.manifest(owner, record.epoch)
        state = KeyedState(manifest.key_group_count)
        shards = 0
        size = 0
        for shard in self._reader.fetch(manifest):
            state.install(shard.key_groups, lazy=lazy)
            shards += 1
            size += shard.meta.size
        seconds = time.perf_counter() - started
        report = RestoreReport(
            record.epoch, mechanism, PLAIN_FETCH, shards, size, seconds
        )
        return state, report

    def _recoverer(self, mechanism: str) -> Recoverer:
        """A recoverer over this ring with ``mechanism`` as its configured one."""
        return Recoverer(
            RecoveryContext(
                manifests=self.manifests,
                members=self.members,
                pool=self.pool,
                node_config=self.config.node,
                recovery=replace(self.config.recovery, mechanism=mechanism),
            )
        )

    def restore_lazily(
        self,
        owner: str,
        record: CommitRecord | None,
        *,
        key_group_count: int,
        mechanism: str,
        on_loaded: Callable[[LoadStats], None] | None = None,
    ) -> tuple[KeyedState, RestoreReport]:
        """Return ``owner``'s committed state deferred: its key groups come later.

        The state reads the same chain (base and deltas of the committed epoch)
        as :meth:`restore`, key group by key group as its keys are touched, while
        the rest comes in the background through the structure the planner
        chose for ``mechanism`` (star, line or tree; ``auto`` decides as the
        eager restore does), then shard by shard for whatever that transfer
        left missing (:class:`backend.lazy.ChainLoader`); ``on_loaded`` is
        called once every key group arrived. The planning runs in the
        background too, so the report cannot name the structure yet: the
        :class:`~backend.lazy.LoadStats` given to ``on_loaded`` do
        (``transfer``, ``reason``); the report's ``bytes`` are the chain's.
        With nothing committed for ``owner`` this is :meth:`restore`.

        Raises:
            RecoveryError: the committed manifest or a shard record is missing.
            CoordinationError: ZooKeeper failed.
        """
        if record is None or owner not in record.owners:
            return self.restore(
                owner, record, key_group_count=key_group_count, mechanism=mechanism
            )
        started = time.perf_counter()
        manifest = self._reader.manifest(owner, record.epoch)
        recoverer = self._recoverer(mechanism)
        epoch = record.epoch
        loader = ChainLoader(
            self.store,
            manifest,
            self.manifests.shards(owner),
            on_loaded=on_loaded,
            # planned on the loader's thread: probing holders (auto) is not
            # on the task's way to its first tuple
            plan=lambda: recoverer.plan_transfer(
                owner, mechanism=mechanism, epoch=epoch
            ),
        )
        state = KeyedState(manifest.key_group_count)
        state.defer(loader.key_groups, loader)
        loader.start()
        report = RestoreReport(
            record.epoch,
            mechanism,
            LAZY_FETCH,
            len(manifest.shard_ids),
            loader.bytes_total,
            time.perf_counter() - started,
            reason=(
                "lazy restore: key groups fetched when first needed, the rest "
                "planned and brought in the background"
            ),
        )
        return state, report

    def restore_task(  # noqa: PLR0913 (what identifies a task and its restore)
        self,
        *,
        topology: str,
        component: str,
        index: int,
        tasks: int,
        record: CommitRecord | None,
        key_group_count: int,
        mechanism: str,
        route: Route,
        lazy: bool = False,
        on_loaded: Callable[[LoadStats], None] | None = None,
    ) -> tuple[KeyedState, RestoreReport]:
        """Restore task ``index`` of ``tasks`` of a stateful component.

        When the committed epoch holds as many owners of the component as it
        has tasks now (or none), this is :meth:`restore` of the task's owner.
        When the component was rescaled, every committed owner is restored and
        the task keeps the keys ``route`` sends to ``index``: ``route(key,
        stored_route)`` is the task index among ``tasks`` Storm's fields grouping
        sends the key's tuples to, ``stored_route`` the key's route when it is
        not the key itself (:data:`sr3.key_state.ROUTE_FIELD`). The report's
        ``used`` says so. The task's next snapshot must be full.

        With ``lazy`` and no rescale, the state is :meth:`restore_lazily`'s
        (``on_loaded`` is called when it has all arrived); a rescale restores
        eagerly.

        Raises:
            RecoveryError, ShardNotFoundError: a snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        owner = owner_name(topology, component, index)
        committed_owners = record.owners if record else ()
        committed = component_owners(committed_owners, topology, component)
        if record is None or len(committed) in (0, tasks):
            if lazy:
                return self.restore_lazily(
                    owner,
                    record,
                    key_group_count=key_group_count,
                    mechanism=mechanism,
                    on_loaded=on_loaded,
                )
            return self.restore(
                owner, record, key_group_count=key_group_count, mechanism=mechanism
            )
        started = time.perf_counter()
        sources = candidate_owners(committed, index, tasks)
        found = reshard(
            self,
            record,
            sources,
            key_group_count=key_group_count,
            mechanism=mechanism,
            route=route,
            index=index,
        )
        state = KeyedState(key_group_count)
        for placed in found.keys:
            state.for_key(placed.key, placed.route).update(placed.fields)
        used = ",".join(sorted(found.used))
        how = (
            f"rescale {len(committed)}->{tasks} tasks, read {len(sources)} of "
            f"{len(committed)} owners ({used})"
        )
        logger.info("%s restored from %d owners: %s", owner, len(committed), how)
        return state, RestoreReport(
            record.epoch,
            mechanism,
            how,
            found.shards,
            found.bytes_read,
            time.perf_counter() - started,
            reason=f"{component} had {len(committed)} tasks at epoch {record.epoch}",
        )

    def read_key_groups(
        self,
        owner: str,
        epoch: int,
        key_groups: Iterable[int],
        cache: ShardCache | None = None,
    ) -> tuple[list[dict[int, bytes | memoryview]], int]:
        """Read only ``key_groups`` of ``owner``'s chain at ``epoch``.

        Only the chain's shards holding one of them are fetched (a key-group
        hand-over reads what moves, not the sender's whole state), and of
        those only the ones ``cache`` does not hold (shards never change);
        what is fetched is kept there.

        Returns:
            The key groups' blobs by shard, oldest first (install them in
            order: a base, then deltas), and the payload bytes fetched.

        Raises:
            RecoveryError: ``owner`` has no manifest at ``epoch``.
            ShardNotFoundError: a shard has no live valid replica.
            CoordinationError: ZooKeeper failed.
        """
        wanted = set(key_groups)
        manifest = self._reader.manifest(owner, epoch)
        metas = self.manifests.shards(owner)
        chain = {
            m.shard_id
            for m in shards_to_read(
                [metas[sid] for sid in manifest.shard_ids if sid in metas]
            )
        }
        ids = tuple(
            sid
            for sid in manifest.shard_ids
            if sid in chain and wanted.intersection(metas[sid].key_groups)
        )
        found: dict[str, dict[int, bytes | memoryview]] = {}
        for sid in ids:
            kept = None if cache is None else cache.get(sid)
            if kept is not None:
                found[sid] = kept
        missing = tuple(sid for sid in ids if sid not in found)
        size = 0
        for shard in self._reader.fetch(replace(manifest, shard_ids=missing)):
            size += shard.meta.size
            found[shard.meta.shard_id] = shard.key_groups
            if cache is not None:
                cache.put(shard.meta.shard_id, shard.meta.size, shard.key_groups)
        layers = [
            {kg: b for kg, b in found[sid].items() if kg in wanted} for sid in ids
        ]
        return layers, size

    def committed_state(
        self, topology: str, component: str
    ) -> tuple[int, CommittedState]:
        """Return the committed epoch and state of a component, ``{key: fields}``.

        See :meth:`backend.committed.CommittedReader.committed_state`.
        """
        return self._committed.committed_state(topology, component)

    def state_summary(
        self, topology: str, components: Iterable[str]
    ) -> dict[str, dict[str, Any]]:
        """Return ``{component: {"epoch", "keys"}}`` of the committed state.

        See :meth:`backend.committed.CommittedReader.state_summary`.
        """
        return self._committed.state_summary(topology, components)

    def committed_dump(
        self, topology: str, component: str
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Return the committed epoch and state as ``sr3 state dump`` prints it.

        See :meth:`backend.committed.CommittedReader.committed_dump`.
        """
        return self._committed.committed_dump(topology, component)

    def write(
        self,
        *,
        owner: str,
        epoch: int,
        key_group_count: int,
        key_groups: Iterable[tuple[int, bytes]],
        kind: str,
        offsets: Mapping[str, Any],
        base: Manifest | None = None,
    ) -> WriteReport:
        """Write one epoch of ``owner`` through the ring and publish its manifest.

        A delta appends to ``base`` (default: the latest published manifest).

        Raises:
            QuorumError: a shard missed its write quorum.
            CoordinationError: the manifest could not be published.
        """
        return self._writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=key_group_count,
            key_groups=key_groups,
            kind=kind,
            offsets=offsets,
            base=base,
        )

    def collect_committed(self, owners: Iterable[str], epoch: int) -> None:
        """Forget what committed ``epoch`` made unreachable for ``owners``.

        See :meth:`backend.collector.ChainCollector.collect_committed`.
        """
        self._collector.collect_committed(owners, epoch)

    def collect_garbage(self, owner: str, committed_epoch: int) -> GcReport:
        """Drop ``owner``'s epochs before the base of ``committed_epoch``'s chain.

        See :meth:`backend.collector.ChainCollector.collect_garbage`.
        """
        return self._collector.collect_garbage(owner, committed_epoch)
