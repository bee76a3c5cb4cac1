"""Writing an owner's snapshot into the ring; the reader is re-exported here.

A snapshot arrives as a stream of encoded key groups. The writer packs consecutive
key groups into shards up to ``max_shard_bytes``, writes each shard through the
replicated store while the next is being packed (a bounded number in flight), and
publishes the manifest only after every shard met its write quorum; a write that
fails before that deletes the replicas it wrote. A delta epoch
lists the shards of its base chain followed by its own.

Incremental snapshots: a DELTA epoch holds only the key groups changed since the
previous epoch and lists its base chain's shards; a FULL epoch starts a new chain.
Which one an owner writes is the state backend's decision (:mod:`backend.chain`).
Once a new base commits, older epochs and every shard no remaining manifest
references are garbage-collected: their records are dropped from the manifest
store, then their replicas deleted.
Reading a snapshot back is :mod:`sr3.snapshot_reader`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sr3.checksum import crc32
from sr3.codec import blob_spans, encode_shard
from sr3.errors import ConfigError, StorageError
from sr3.manifest import Manifest, ShardMeta, shard_id_for
from sr3.ports import DropGuard, ManifestStore, NodeInfo
from sr3.replication import ReplicatedStore
from sr3.snapshot_reader import FetchedShard, SnapshotReader

__all__ = [
    "FetchedShard",
    "GcReport",
    "SnapshotReader",
    "SnapshotWriter",
    "WriteReport",
]

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]
KeyGroups = Iterable[tuple[int, bytes]]


@dataclass
class GcReport:
    """What a garbage collection removed."""

    epochs: list[int] = field(default_factory=list)
    shards: list[str] = field(default_factory=list)
    replicas_deleted: int = 0
    replicas_failed: int = 0


@dataclass
class WriteReport:
    """What a snapshot write stored, and what its garbage collection removed."""

    manifest: Manifest
    shards: list[ShardMeta]
    bytes_written: int
    seconds: float
    kind: str = "full"
    gc: GcReport | None = None


class SnapshotWriter:
    """Packs key groups into shards, replicates them, then publishes the manifest.

    Args:
        store: Replicated shard store.
        manifests: Manifest store (ZooKeeper in production).
        max_shard_bytes: Shard size bound.
        in_flight: Shards being written at once (default 4).
        collect_garbage: Drop older epochs and unreferenced shards right after
            a new base is published (default False). Only for owners whose
            latest epoch is committed once published (``sr3 snapshot put``);
            under global epochs, call :meth:`collect_garbage` with the committed
            epoch instead, so a rollback still finds its chain.
    """

    def __init__(
        self,
        *,
        store: ReplicatedStore,
        manifests: ManifestStore,
        max_shard_bytes: int,
        in_flight: int = 4,
        collect_garbage: bool = False,
    ) -> None:
        self._store = store
        self._manifests = manifests
        self._max_shard_bytes = max_shard_bytes
        self._in_flight = in_flight
        self._collect = collect_garbage

    def write(
        self,
        *,
        owner: str,
        epoch: int,
        key_group_count: int,
        key_groups: Iterable[tuple[int, bytes]],
        kind: str = "full",
        offsets: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
        base: Manifest | None = None,
    ) -> WriteReport:
        """Write one epoch of ``owner`` and publish its manifest.

        ``kind="full"`` starts a new chain; ``kind="delta"`` appends to ``base``'s
        chain (default: the latest published manifest's). Pass the committed
        manifest as ``base`` when newer, never-committed epochs may exist.

        The caller chooses the kind (:mod:`backend.chain`).

        Raises:
            ConfigError: G differs from the owner's recorded G, or a delta has no
                base.
            QuorumError: a shard could not reach its write quorum.
            CoordinationError: the manifest could not be published.
        """
        started = time.perf_counter()
        recorded = self._manifests.key_group_count(owner)
        if recorded is not None and recorded != key_group_count:
            msg = (
                f"owner {owner!r} was first written with {recorded} key groups; "
                f"writing {key_group_count} would make its state unaddressable. "
                f"Keep sr3.state.key.groups={recorded} for this owner"
            )
            raise ConfigError(msg)
        if kind != "delta":
            base = None
        elif base is None:
            base = self._manifests.latest(owner)
            if base is None:
                msg = f"owner {owner!r} has no committed epoch to apply a delta to"
                raise ConfigError(msg)
        submitted: list[ShardMeta] = []
        try:
            shards = self._write_shards(
                owner, epoch, kind, key_groups, progress, submitted
            )
        except BaseException:
            # nothing refers to these replicas yet (the manifest is published only
            # after every shard): left on the nodes, they would never be collected
            self._discard(submitted)
            raise
        prior = () if base is None else base.shard_ids
        manifest = Manifest(
            owner=owner,
            epoch=epoch,
            key_group_count=key_group_count,
            shard_ids=(*prior, *(s.shard_id for s in shards)),
            base_epoch=epoch if base is None else base.base_epoch,
            offsets=dict(offsets or {}),
            created_at=time.time(),
            extra=dict(extra or {}),
        )
        self._manifests.publish(manifest, shards)
        gc = None
        if kind == "full" and self._collect:
            gc = self.collect_garbage(owner)
        return WriteReport(
            manifest=manifest,
            shards=shards,
            bytes_written=sum(s.size for s in shards),
            seconds=time.perf_counter() - started,
            kind=kind,
            gc=gc,
        )

    def collect_garbage(
        self,
        owner: str,
        committed_epoch: int | None = None,
        *,
        keep: Collection[int] = (),
        guard: DropGuard | None = None,
    ) -> GcReport:
        """Drop epochs older than a committed chain's base, and unreferenced shards.

        Args:
            owner: Whose epochs.
            committed_epoch: The newest epoch that may be rolled back to (default:
                the latest); epochs before the base of its chain are dropped.
            keep: Epochs kept whatever their age (savepoints pin them), with
                every shard their manifests list.
            guard: The condition under which ``keep`` was read (the pins did
                not change since); the drop refuses once it no longer holds.

        Records go first (:meth:`ManifestStore.drop`), then replicas are deleted
        from their live holders; a replica whose holder is down stays until that
        node's data dir is wiped, and is logged.

        Raises:
            CoordinationError: the manifest store failed, or no such epoch.
        """
        report = GcReport()
        if committed_epoch is None:
            anchor = self._manifests.latest(owner)
            if anchor is None:
                return report
        else:
            anchor = self._manifests.manifest(owner, committed_epoch)
        epochs = self._manifests.epochs(owner)
        report.epochs = [e for e in epochs if e < anchor.base_epoch and e not in keep]
        referenced: set[str] = set()
        for e in epochs:
            if e >= anchor.base_epoch or e in keep:
                referenced.update(self._manifests.manifest(owner, e).shard_ids)
        records = self._manifests.shards(owner)
        garbage = [meta for sid, meta in records.items() if sid not in referenced]
        report.shards = sorted(meta.shard_id for meta in garbage)
        if not report.epochs and not garbage:
            return report
        self._manifests.drop(owner, report.epochs, report.shards, guard=guard)
        self._delete_replicas(garbage, report)
        logger.info(
            "gc of %s: dropped epochs %s, %d shards, %d replicas (%d failed)",
            owner,
            report.epochs,
            len(report.shards),
            report.replicas_deleted,
            report.replicas_failed,
        )
        return report

    def _delete_replicas(self, garbage: list[ShardMeta], report: GcReport) -> None:
        _, live = self._store.ring()
        targets = [(m.shard_id, h) for m in garbage for h in m.holders if h in live]
        report.replicas_failed += sum(
            1 for m in garbage for h in m.holders if h not in live
        )
        deleted = self._delete_each(targets, live, "gc")
        report.replicas_deleted += deleted
        report.replicas_failed += len(targets) - deleted

    def _discard(self, written: list[ShardMeta]) -> None:
        """Delete, best effort, the replicas of an epoch whose write failed.

        A failed put may have reached some of its preference list: every node of
        the list is asked.
        """
        if not written:
            return
        try:
            _, live = self._store.ring()
            targets = [
                (m.shard_id, h)
                for m in written
                for h in self._store.preference_list(m.shard_id)
                if h in live
            ]
        except StorageError:
            return  # no node alive: nothing to reach
        deleted = self._delete_each(targets, live, "failed write")
        logger.info(
            "failed write of %s epoch %d: %d replicas of %d shards deleted",
            written[0].owner,
            written[0].epoch,
            deleted,
            len(written),
        )

    def _delete_each(
        self, targets: list[tuple[str, str]], live: Mapping[str, NodeInfo], why: str
    ) -> int:
        """Delete each (shard id, node) replica; return how many went."""

        def delete(item: tuple[str, str]) -> bool:
            shard_id, holder = item
            try:
                with self._store.pool.client(live[holder]) as client:
                    client.delete(shard_id)
            except StorageError as exc:
                logger.warning(
                    "%s: replica of %s on %s not deleted: %s",
                    why,
                    shard_id,
                    holder,
                    exc,
                )
                return False
            return True

        with ThreadPoolExecutor(8, thread_name_prefix="sr3-delete") as pool:
            return sum(pool.map(delete, targets))

    def _write_shards(
        self,
        owner: str,
        epoch: int,
        kind: str,
        key_groups: Iterable[tuple[int, bytes]],
        progress: Progress | None,
        submitted: list[ShardMeta],
    ) -> list[ShardMeta]:
        pending: list[Future[ShardMeta]] = []
        done: list[ShardMeta] = []
        with ThreadPoolExecutor(
            self._in_flight, thread_name_prefix="sr3-shard"
        ) as pool:
            for seq, batch in enumerate(self._batches(key_groups)):
                data = encode_shard(owner, epoch, kind, batch)
                spans = blob_spans(data, batch)
                meta = ShardMeta(
                    shard_id=shard_id_for(owner, epoch, seq),
                    owner=owner,
                    epoch=epoch,
                    size=len(data),
                    crc32=crc32(data),
                    key_groups=tuple(batch),
                    kind=kind,
                    spans=tuple(spans[kg] for kg in batch),
                )
                while len(pending) >= self._in_flight:
                    done.append(pending.pop(0).result())
                submitted.append(meta)
                pending.append(pool.submit(self._store.put, meta, data))
                if progress is not None:
                    progress(len(data))
            done.extend(f.result() for f in pending)
        return done

    def _batches(
        self, key_groups: Iterable[tuple[int, bytes]]
    ) -> Iterator[dict[int, bytes]]:
        batch: dict[int, bytes] = {}
        size = 0
        for kg, blob in key_groups:
            if batch and size + len(blob) > self._max_shard_bytes:
                yield batch
                batch, size = {}, 0
            batch[kg] = blob
            size += len(blob)
        if batch:
            yield batch
