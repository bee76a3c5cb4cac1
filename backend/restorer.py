"""Restoring an owner's committed state from the ring, eagerly, lazily or rescaled.

:class:`StateRestorer` is what :class:`backend.access.RingAccess` restores
through: an owner's chain at the committed epoch goes through star, line or
tree recovery (:mod:`sr3.recovery`), or comes key group by key group as a
resumed task touches it (:class:`backend.lazy.ChainLoader`), or, after a
parallelism change, from every committed owner of the component
(:func:`backend.rescale.reshard`). Every path reads the chain's shards through
:func:`sr3.recovery.transfer_plan.shards_to_read`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from backend.lazy import LAZY_FETCH, ChainLoader, LoadStats
from backend.owners import component_owners, owner_name
from backend.rescale import Route, candidate_owners, reshard
from backend.shard_cache import ShardCache
from sr3.client import ClientPool
from sr3.config import Sr3Config
from sr3.errors import RecoveryError
from sr3.recovery import Recoverer, RecoveryContext
from sr3.recovery.transfer_plan import shards_to_read
from sr3.replication import LiveMembers, ReplicatedStore
from sr3.snapshot import SnapshotReader
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord
from zk.manifests import ZkManifestStore

__all__ = ["PLAIN_FETCH", "RestoreReport", "StateRestorer"]

logger = logging.getLogger(__name__)

#: How a restore fetched the shards when the star/line/tree recovery failed.
PLAIN_FETCH = "parallel-fetch"


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


class StateRestorer:
    """Restore owners' committed state over one process's ring handles.

    Args:
        config: The process's sr3 configuration (recovery settings, node).
        store: The replicated store over the live ring members.
        manifests: Published manifests and shard records.
        members: The live ring members.
        pool: Connections to ring nodes.
        reader: Reads manifests and fetches shards (the ring access's own).
    """

    def __init__(  # noqa: PLR0913 (the ring handles a restore uses)
        self,
        config: Sr3Config,
        *,
        store: ReplicatedStore,
        manifests: ZkManifestStore,
        members: LiveMembers,
        pool: ClientPool,
        reader: SnapshotReader,
    ) -> None:
        self.config = config
        self.store = store
        self.manifests = manifests
        self.members = members
        self.pool = pool
        self._reader = reader

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
