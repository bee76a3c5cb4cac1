"""Re-replication: bring every shard back to r live replicas on its preference list.

The elected coordinator runs :meth:`RepairCoordinator.reconcile` after membership
changes (after a short grace period, so a node that reconnects at once costs no
copies) and on a periodic scan. One reconcile handles every case the same way:

* a holder died: its shards get a new replica on the next preference-list node,
  copied node to node from a surviving holder;
* a node joined: only shards whose preference list now includes it move to it, and
  the replica that dropped off the list is deleted once r desired copies exist;
* a node came back with its data dir: its intact replicas are adopted in place
  (a checksum-matching ``has``), with no copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sr3.client import ClientPool
from sr3.config import RepairConfig, RingConfig
from sr3.errors import CodecError, SR3Error, StorageError
from sr3.manifest import ShardMeta
from sr3.ports import Election, ManifestStore, Membership, NodeInfo
from sr3.ring import HashRing

__all__ = ["RepairCoordinator", "RepairReport", "replication_health"]

logger = logging.getLogger(__name__)


@dataclass
class RepairReport:
    """What one reconcile pass found and did."""

    shards: int = 0
    copied: int = 0
    adopted: int = 0
    deleted: int = 0
    orphans_deleted: int = 0
    bytes_copied: int = 0
    #: shards with fewer live holders than r (or than the live nodes) at the start
    under_replicated: int = 0
    lost: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unreadable_owners: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        """Whether the pass moved, adopted or deleted anything."""
        return bool(self.copied or self.adopted or self.deleted or self.orphans_deleted)


def replication_health(
    shards: Mapping[str, ShardMeta], live: Mapping[str, NodeInfo], r: int
) -> tuple[int, int]:
    """Return (under-replicated, lost) shard counts.

    A shard is under-replicated when it has fewer live holders than
    ``min(r, live nodes)`` (more cannot exist), and lost when it has none.
    """
    target = min(r, len(live))
    under = lost = 0
    for meta in shards.values():
        alive = sum(1 for h in meta.holders if h in live)
        if alive == 0:
            lost += 1
        if alive < target:
            under += 1
    return under, lost


class RepairCoordinator:
    """Reconciles shard holders with preference lists over the live nodes.

    Args:
        membership: Live ring nodes.
        manifests: Shard holder records.
        pool: Clients to ring nodes.
        ring_config: r and vnodes.
        repair_config: Grace period, scan interval and copy parallelism.
        election: When given, :meth:`run` repairs only while leader.
        on_pass: Called with the report of every pass :meth:`run` completes
            (the node's metrics).
        clock: Monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        *,
        membership: Membership,
        manifests: ManifestStore,
        pool: ClientPool,
        ring_config: RingConfig,
        repair_config: RepairConfig,
        election: Election | None = None,
        on_pass: Callable[[RepairReport], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_pass = on_pass
        self._membership = membership
        self._manifests = manifests
        self._pool = pool
        self._ring_config = ring_config
        self._config = repair_config
        self._election = election
        self._clock = clock
        self._changed = threading.Event()
        self._stop = threading.Event()
        self.last_report: RepairReport | None = None
        self._present: dict[str, dict[str, tuple[int, int]]] = {}
        #: (node, shard id) of replicas no record names -> when first seen so
        self._orphans: dict[tuple[str, str], float] = {}
        self._unreadable: dict[str, str] = {}  # owner -> problem already warned

    def notify(self, _members: Mapping[str, NodeInfo] | None = None) -> None:
        """Signal a membership change (usable as a membership watch callback)."""
        self._changed.set()

    def stop(self) -> None:
        """Make :meth:`run` return."""
        self._stop.set()
        self._changed.set()

    def run(self) -> None:
        """Reconcile after changes and periodically until :meth:`stop`."""
        while not self._stop.is_set():
            self._changed.wait(self._config.scan_interval_s)
            if self._stop.is_set():
                return
            if self._changed.is_set():
                self._settle()
            if self._election is not None and not self._election.is_leader():
                continue
            try:
                report = self.reconcile()
            except SR3Error as exc:
                logger.warning("repair pass failed, will retry: %s", exc)
                continue
            except Exception:  # a bug: the ring must not lose its repairs to it
                logger.exception("repair pass hit an unexpected error; will retry")
                continue
            if self._on_pass is not None:
                self._on_pass(report)
            if report.changed or report.lost:
                logger.info(
                    "repair: %d shards, %d copied (%d bytes), %d adopted, "
                    "%d deleted, %d unnamed deleted, %d lost, %d failed in %.2fs",
                    report.shards,
                    report.copied,
                    report.bytes_copied,
                    report.adopted,
                    report.deleted,
                    report.orphans_deleted,
                    len(report.lost),
                    len(report.failed),
                    report.seconds,
                )

    def _settle(self) -> None:
        """Wait until membership has been quiet for ``grace_s`` (at most 10 graces).

        A node that reconnects at once then costs no copies, simultaneous failures
        are repaired in one pass, and after a ZooKeeper outage the nodes that
        re-register one by one do not each trigger a pass over a partial view.
        """
        limit = self._clock() + 10 * self._config.grace_s
        while not self._stop.is_set():
            self._changed.clear()
            if not self._changed.wait(self._config.grace_s):
                return
            if self._clock() >= limit:
                self._changed.clear()
                return

    def reconcile(self) -> RepairReport:
        """Run one pass over every owner's shards.

        Raises:
            CoordinationError: ZooKeeper could not be read.
        """
        started = self._clock()
        report = RepairReport()
        live = self._membership.members()
        if not live:
            return report
        ring = HashRing(live.values(), vnodes=self._ring_config.vnodes)
        r = self._ring_config.replication_factor
        self._present = self._inventory(live)
        work: list[ShardMeta] = []
        for owner in self._manifests.owners():
            try:
                metas = self._manifests.shards(owner).values()
            except CodecError as exc:
                self._skip_owner(owner, exc, report)
                continue
            for meta in metas:
                report.shards += 1
                work.append(meta)
        self._unreadable = {
            o: p for o, p in self._unreadable.items() if o in report.unreadable_owners
        }
        if report.unreadable_owners:
            # their replicas are named by records this pass cannot read: sweeping
            # them as orphans would delete state nobody chose to drop
            logger.debug("orphan sweep skipped: %s", report.unreadable_owners)
        else:
            # the inventory was listed before the records were read: a replica
            # whose record exists by now is named in ``work``
            self._sweep_orphans(live, {m.shard_id for m in work}, report)
        with ThreadPoolExecutor(
            self._config.parallel_copies, thread_name_prefix="sr3-repair"
        ) as pool:
            results = list(
                pool.map(lambda m: self._reconcile_one(m, ring, live, r), work)
            )
        for part in results:
            report.copied += part.copied
            report.adopted += part.adopted
            report.deleted += part.deleted
            report.bytes_copied += part.bytes_copied
            report.under_replicated += part.under_replicated
            report.lost.extend(part.lost)
            report.failed.extend(part.failed)
        report.seconds = self._clock() - started
        self.last_report = report
        return report

    def _skip_owner(self, owner: str, exc: CodecError, report: RepairReport) -> None:
        """Leave an owner whose records cannot be read; warn once per problem."""
        report.unreadable_owners.append(owner)
        if self._unreadable.get(owner) != str(exc):
            self._unreadable[owner] = str(exc)
            logger.warning(
                "repair skips owner %r, whose shard records cannot be read (its "
                "replicas are kept; no replica is swept as an orphan meanwhile): %s",
                owner,
                exc,
            )

    def _reconcile_one(
        self, meta: ShardMeta, ring: HashRing, live: Mapping[str, NodeInfo], r: int
    ) -> RepairReport:
        """:meth:`_reconcile_shard`; a damaged record costs only that shard."""
        try:
            return self._reconcile_shard(meta, ring, live, r)
        except CodecError as exc:
            logger.warning("repair of shard %s failed, retried: %s", meta.shard_id, exc)
            return RepairReport(failed=[meta.shard_id])

    def _reconcile_shard(
        self, meta: ShardMeta, ring: HashRing, live: Mapping[str, NodeInfo], r: int
    ) -> RepairReport:
        report = RepairReport()
        desired = ring.preference_list(meta.shard_id, r)
        # a recorded holder counts only while it still indexes an intact replica
        # (a replica found corrupt is quarantined by its node and drops out here)
        sources = [h for h in meta.holders if h in live and self._holds(h, meta)]
        if not sources:
            sources = [h for h in meta.holders if h in live and h not in self._present]
        if not sources:
            report.lost.append(meta.shard_id)
            logger.error(
                "shard %s has no live holder (recorded holders %s); it comes back "
                "only if one of them restarts with its data dir",
                meta.shard_id,
                list(meta.holders),
            )
            return report
        if len(sources) < min(r, len(live)):
            report.under_replicated = 1
        placed = [d for d in desired if d in sources]
        for node_id in desired:
            if node_id in placed:
                continue
            if self._has_valid(live[node_id], meta):
                placed.append(node_id)
                report.adopted += 1
                continue
            if self._copy(meta, live[node_id], [live[s] for s in sources]):
                placed.append(node_id)
                report.copied += 1
                report.bytes_copied += meta.size
            else:
                report.failed.append(meta.shard_id)
        extras = [s for s in sources if s not in placed]
        # keep surplus replicas until r desired copies exist; drop them after
        complete = len(placed) >= min(r, len(live))
        holders = [d for d in desired if d in placed] + ([] if complete else extras)
        if tuple(holders) != meta.holders:
            # publish the new holders before deleting anything, so readers of the
            # record never point only at deleted replicas
            self._manifests.update_holders(meta.owner, meta.shard_id, lambda _: holders)
        if complete:
            for node_id in extras:
                if self._delete(live[node_id], meta):
                    report.deleted += 1
        return report

    def _sweep_orphans(
        self, live: Mapping[str, NodeInfo], recorded: set[str], report: RepairReport
    ) -> None:
        """Delete replicas no shard record has named for ``orphan_grace_s``.

        A writer publishes its manifest after every shard is written, so a
        replica without a record is either being written (seconds) or was left
        by a writer that died before publishing: nothing will ever read it.
        """
        grace = self._config.orphan_grace_s
        if grace <= 0:
            return
        now = self._clock()
        unnamed = {
            (node_id, shard_id)
            for node_id, index in self._present.items()
            for shard_id in index
            if shard_id not in recorded
        }
        self._orphans = {k: self._orphans.get(k, now) for k in unnamed}
        for (node_id, shard_id), since in list(self._orphans.items()):
            if now - since < grace or node_id not in live:
                continue
            if self._delete_id(live[node_id], shard_id):
                logger.info(
                    "deleted replica %s on %s: no shard record named it for %.0f s",
                    shard_id,
                    node_id,
                    now - since,
                )
                report.orphans_deleted += 1
                del self._orphans[(node_id, shard_id)]

    def _inventory(
        self, live: Mapping[str, NodeInfo]
    ) -> dict[str, dict[str, tuple[int, int]]]:
        """Return each reachable node's replica index: shard -> (size, crc32)."""
        present: dict[str, dict[str, tuple[int, int]]] = {}
        for node_id, node in live.items():
            try:
                with self._pool.client(node) as client:
                    replicas = client.list()
            except StorageError as exc:
                logger.info("cannot list replicas on %s: %s", node_id, exc)
                continue
            present[node_id] = {i.shard_id: (i.size, i.crc32) for i in replicas}
        return present

    def _holds(self, node_id: str, meta: ShardMeta) -> bool:
        index = self._present.get(node_id)
        if index is None:  # unreachable for listing: trust the record
            return True
        return index.get(meta.shard_id) == (meta.size, meta.crc32)

    def _has_valid(self, node: NodeInfo, meta: ShardMeta) -> bool:
        if node.node_id in self._present:
            return self._holds(node.node_id, meta)
        try:
            with self._pool.client(node) as client:
                info = client.has(meta.shard_id)
        except StorageError as exc:
            logger.info("has(%s) on %s failed: %s", meta.shard_id, node.node_id, exc)
            return False
        return info is not None and info.crc32 == meta.crc32 and info.size == meta.size

    def _copy(self, meta: ShardMeta, target: NodeInfo, sources: list[NodeInfo]) -> bool:
        for source in sources:
            try:
                with self._pool.client(target) as client:
                    client.pull(meta.shard_id, meta.crc32, source.host, source.port)
            except StorageError as exc:
                logger.warning(
                    "copy of %s from %s to %s failed: %s",
                    meta.shard_id,
                    source.node_id,
                    target.node_id,
                    exc,
                )
                continue
            logger.debug(
                "copied %s %s -> %s", meta.shard_id, source.node_id, target.node_id
            )
            return True
        return False

    def _delete(self, node: NodeInfo, meta: ShardMeta) -> bool:
        return self._delete_id(node, meta.shard_id)

    def _delete_id(self, node: NodeInfo, shard_id: str) -> bool:
        try:
            with self._pool.client(node) as client:
                return client.delete(shard_id)
        except StorageError as exc:
            logger.info("delete of %s on %s failed: %s", shard_id, node.node_id, exc)
            return False
