"""Writing an owner's snapshot into the ring and reading it back.

A snapshot arrives as a stream of encoded key groups. The writer packs consecutive
key groups into shards up to ``max_shard_bytes``, writes each shard through the
replicated store while the next is being packed (a bounded number in flight), and
publishes the manifest only after every shard met its write quorum. A delta epoch
lists the shards of its base chain followed by its own.

Incremental snapshots: :meth:`SnapshotWriter.write_epoch` writes a DELTA epoch (only
the key groups changed since the previous epoch) unless the chain would then hold
more than ``max_chain_length`` deltas (``sr3.checkpoint.max.chain.length``); then
it compacts by writing a FULL epoch, a new base. Once a new base commits, older
epochs and every shard no remaining manifest references are garbage-collected:
their records are dropped from the manifest store, then their replicas deleted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from sr3.codec import decode_shard, encode_shard
from sr3.errors import (
    ChecksumError,
    ConfigError,
    CoordinationError,
    RecoveryError,
    StorageError,
)
from sr3.manifest import Manifest, ShardMeta, shard_id_for
from sr3.ports import ManifestStore
from sr3.replication import ReplicatedStore
from sr3.storage import crc32

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


@dataclass
class FetchedShard:
    """A shard read back: its metadata, the node that served it, its key groups."""

    meta: ShardMeta
    served_by: str
    key_groups: dict[int, bytes | memoryview] = field(default_factory=dict)


class _StreamClosedError(Exception):
    """The consumer of :meth:`SnapshotReader.stream` left; its pumps stop."""


class _Buffers:
    """One holder's receive buffers for :meth:`SnapshotReader.stream`.

    The pump thread takes a buffer per payload (at most ``count`` lent at once,
    then it waits); the consumer gives each back once it moved on. A buffer
    the consumer still holds views of is never reused: a fresh one replaces it.
    """

    def __init__(self, count: int, size: int) -> None:
        self._size = max(size, 1)
        self._free: queue.SimpleQueue[bytearray | None] = queue.SimpleQueue()
        for _ in range(count):
            self._free.put(bytearray())  # allocated when first taken

    def take(self, size: int) -> memoryview:
        """Return a writable view of exactly ``size`` bytes (pump thread).

        Raises:
            _StreamClosedError: the consumer left.
        """
        buf = self._free.get()
        if buf is None:
            self._free.put(None)
            raise _StreamClosedError
        if len(buf) < size or not buf:
            buf = bytearray(max(size, self._size))
        with memoryview(buf) as whole:
            return whole[:size]

    def give_back(self, view: memoryview) -> None:
        """Release a view the consumer is done with; reuse its buffer if free."""
        buf = view.obj
        try:
            view.release()
            if not isinstance(buf, bytearray):
                buf = bytearray()
            else:  # resizing fails while any view or export of the buffer is alive
                buf.append(buf.pop())
        except BufferError:
            buf = bytearray()
        self._free.put(buf)

    def close(self) -> None:
        """Make waiting and later :meth:`take` calls raise _StreamClosedError."""
        self._free.put(None)


_Streamed = tuple[ShardMeta, bytes | memoryview, _Buffers | None]


class SnapshotWriter:
    """Packs key groups into shards, replicates them, then publishes the manifest.

    Args:
        store: Replicated shard store.
        manifests: Manifest store (ZooKeeper in production).
        max_shard_bytes: Shard size bound.
        in_flight: Shards being written at once (default 4).
        max_chain_length: Deltas a chain may hold before :meth:`write_epoch`
            compacts with a FULL epoch (``sr3.checkpoint.max.chain.length``,
            default 8).
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
        max_chain_length: int = 8,
        collect_garbage: bool = False,
    ) -> None:
        if max_chain_length < 1:
            msg = (
                f"max_chain_length={max_chain_length}; set "
                "sr3.checkpoint.max.chain.length to at least 1"
            )
            raise ConfigError(msg)
        self._store = store
        self._manifests = manifests
        self._max_shard_bytes = max_shard_bytes
        self._in_flight = in_flight
        self._max_chain_length = max_chain_length
        self._collect = collect_garbage

    def next_kind(self, owner: str, epoch: int) -> str:
        """Return ``"full"`` or ``"delta"``: what :meth:`write_epoch` writes next.

        FULL when the owner has no committed epoch, or when a delta at ``epoch``
        would leave more than ``max_chain_length`` deltas after the base.
        """
        latest = self._manifests.latest(owner)
        if latest is None or epoch - latest.base_epoch > self._max_chain_length:
            return "full"
        return "delta"

    def write_epoch(
        self,
        *,
        owner: str,
        epoch: int,
        key_group_count: int,
        full: Callable[[], KeyGroups],
        delta: Callable[[], KeyGroups],
        offsets: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> WriteReport:
        """Write an incremental epoch, compacting to a FULL one when due.

        Args:
            owner: Whose snapshot.
            epoch: The epoch to publish (newer than the latest).
            key_group_count: G of the owner.
            full: Returns every non-empty key group as FULL blobs (called when
                compacting or for the first epoch).
            delta: Returns the key groups changed since the latest epoch as DELTA
                blobs (called otherwise).
            offsets: Input and output positions of the snapshot.
            extra: Free-form manifest metadata.
            progress: Called with bytes as shards are written.

        Raises:
            ConfigError: G differs from the owner's recorded G.
            QuorumError: a shard could not reach its write quorum.
            CoordinationError: the manifest could not be published.
        """
        kind = self.next_kind(owner, epoch)
        return self.write(
            owner=owner,
            epoch=epoch,
            key_group_count=key_group_count,
            key_groups=full() if kind == "full" else delta(),
            kind=kind,
            offsets=offsets,
            extra=extra,
            progress=progress,
        )

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

        The caller chooses the kind; :meth:`write_epoch` chooses it for the
        caller, compacting at ``max_chain_length``.

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
        shards = self._write_shards(owner, epoch, kind, key_groups, progress)
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
        self, owner: str, committed_epoch: int | None = None
    ) -> GcReport:
        """Drop epochs older than a committed chain's base, and unreferenced shards.

        Args:
            owner: Whose epochs.
            committed_epoch: The newest epoch that may be rolled back to (default:
                the latest); epochs before the base of its chain are dropped.

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
        report.epochs = [e for e in epochs if e < anchor.base_epoch]
        referenced: set[str] = set()
        for e in epochs:
            if e >= anchor.base_epoch:
                referenced.update(self._manifests.manifest(owner, e).shard_ids)
        records = self._manifests.shards(owner)
        garbage = [meta for sid, meta in records.items() if sid not in referenced]
        report.shards = sorted(meta.shard_id for meta in garbage)
        if not report.epochs and not garbage:
            return report
        self._manifests.drop(owner, report.epochs, report.shards)
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
        targets = [(m, h) for m in garbage for h in m.holders if h in live]
        report.replicas_failed += sum(
            1 for m in garbage for h in m.holders if h not in live
        )

        def delete(item: tuple[ShardMeta, str]) -> bool:
            meta, holder = item
            try:
                with self._store.pool.client(live[holder]) as client:
                    client.delete(meta.shard_id)
            except StorageError as exc:
                logger.warning(
                    "gc: replica of %s on %s not deleted: %s",
                    meta.shard_id,
                    holder,
                    exc,
                )
                return False
            return True

        with ThreadPoolExecutor(8, thread_name_prefix="sr3-gc") as pool:
            for ok in pool.map(delete, targets):
                if ok:
                    report.replicas_deleted += 1
                else:
                    report.replicas_failed += 1

    def _write_shards(
        self,
        owner: str,
        epoch: int,
        kind: str,
        key_groups: Iterable[tuple[int, bytes]],
        progress: Progress | None,
    ) -> list[ShardMeta]:
        pending: list[Future[ShardMeta]] = []
        done: list[ShardMeta] = []
        with ThreadPoolExecutor(
            self._in_flight, thread_name_prefix="sr3-shard"
        ) as pool:
            for seq, batch in enumerate(self._batches(key_groups)):
                data = encode_shard(owner, epoch, kind, batch)
                meta = ShardMeta(
                    shard_id=shard_id_for(owner, epoch, seq),
                    owner=owner,
                    epoch=epoch,
                    size=len(data),
                    crc32=crc32(data),
                    key_groups=tuple(batch),
                    kind=kind,
                )
                while len(pending) >= self._in_flight:
                    done.append(pending.pop(0).result())
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


class SnapshotReader:
    """Reads an owner's committed snapshot from the ring, all shards in parallel.

    This is the plain parallel fetch used by ``sr3 snapshot get`` and repair
    checks; ``sr3.recovery`` builds the star, line and tree structures.
    """

    def __init__(
        self, *, store: ReplicatedStore, manifests: ManifestStore, parallel: int = 8
    ) -> None:
        self._store = store
        self._manifests = manifests
        self._parallel = parallel

    def manifest(self, owner: str, epoch: int | None = None) -> Manifest:
        """Return the manifest to read.

        Raises:
            RecoveryError: the owner has no committed epoch.
        """
        if epoch is not None:
            return self._manifests.manifest(owner, epoch)
        latest = self._manifests.latest(owner)
        if latest is None:
            msg = f"owner {owner!r} has no committed snapshot; write one first"
            raise RecoveryError(msg)
        return latest

    def fetch(
        self, manifest: Manifest, *, progress: Progress | None = None
    ) -> Iterator[FetchedShard]:
        """Yield the manifest's shards in manifest order, decoded but kept lazy.

        Raises:
            ShardNotFoundError: a shard has no live valid replica.
            CoordinationError: a shard record is missing from the manifest store.
        """
        metas = self._manifests.shards(manifest.owner)
        missing = [s for s in manifest.shard_ids if s not in metas]
        if missing:
            msg = (
                f"manifest {manifest.owner}@{manifest.epoch} lists shards with no "
                f"record: {missing}"
            )
            raise CoordinationError(msg)
        # a bounded window of shards in flight: memory stays at a few shards when
        # the caller consumes as it goes, instead of the whole snapshot
        window = 2 * self._parallel
        ids = iter(manifest.shard_ids)
        with ThreadPoolExecutor(self._parallel, thread_name_prefix="sr3-read") as pool:
            pending: deque[Future[FetchedShard]] = deque(
                pool.submit(self._fetch_one, metas[sid]) for sid in islice(ids, window)
            )
            while pending:
                shard = pending.popleft().result()
                nxt = next(ids, None)
                if nxt is not None:
                    pending.append(pool.submit(self._fetch_one, metas[nxt]))
                if progress is not None:
                    progress(shard.meta.size)
                yield shard
                del shard

    def stream(
        self, manifest: Manifest, *, window: int = 4
    ) -> Iterator[tuple[ShardMeta, bytes | memoryview]]:
        """Yield every shard's checked payload as it arrives, in no fixed order.

        Each shard is assigned to one live holder, spreading bytes evenly; one
        pipelined connection per holder moves its shards (``window`` requests in
        flight) straight into a few receive buffers of that holder, reused from
        shard to shard. Shards a holder fails to serve are read through the
        replicated store, which tries the other holders. For bulk reads that do
        not need manifest order (copies, scans, benchmarks); :meth:`fetch` keeps
        order and hands out payloads to keep.

        A payload is a ``memoryview`` (or ``bytes``, when read through the store)
        valid until the next shard is asked for: the view is then released (using
        it raises ``ValueError``) and its buffer reused, unless the caller still
        holds views or exports of it. Copy it (``bytes(data)``) to keep it.

        Raises:
            ShardNotFoundError: a shard has no live valid replica.
            ChecksumError: a shard has no replica passing its crc32.
        """
        metas = self._manifests.shards(manifest.owner)
        _, live = self._store.ring()
        load: dict[str, int] = {}
        plan: dict[str, list[ShardMeta]] = {}
        orphans: list[ShardMeta] = []
        for sid in manifest.shard_ids:
            meta = metas[sid]
            holders = [h for h in meta.holders if h in live]
            if not holders:
                orphans.append(meta)
                continue
            node = min(holders, key=lambda h: load.get(h, 0))
            load[node] = load.get(node, 0) + meta.size
            plan.setdefault(node, []).append(meta)
        out: queue.Queue[_Streamed | Exception | None] = queue.Queue(
            maxsize=2 * window * max(len(plan), 1)
        )
        pools = {
            node: _Buffers(window + 1, max(m.size for m in shards))
            for node, shards in plan.items()
        }

        def pump(node_id: str, shards: list[ShardMeta]) -> None:
            done = 0
            buffers = pools[node_id]
            try:
                try:
                    with self._store.pool.client(live[node_id]) as client:
                        ids = [m.shard_id for m in shards]
                        got = client.get_many(ids, window=window, into=buffers.take)
                        for (_, view), meta in zip(got, shards, strict=False):
                            out.put((meta, view, buffers))
                            done += 1
                except (StorageError, ChecksumError) as exc:
                    logger.info("stream from %s stopped: %s", node_id, exc)
                for meta in shards[done:]:
                    data, _ = self._store.get(meta)
                    out.put((meta, data, None))
            except _StreamClosedError:
                return  # the consumer left: nobody reads the queue
            except Exception as exc:  # a bug or an odd failure: the consumer raises it
                out.put(exc)
            out.put(None)

        threads = [
            threading.Thread(target=pump, args=item, daemon=True)
            for item in plan.items()
        ]
        for t in threads:
            t.start()
        failure: Exception | None = None
        try:
            for meta in orphans:
                data, _ = self._store.get(meta)
                yield meta, data
            running = len(threads)
            while running:
                item = out.get()
                if item is None:
                    running -= 1
                elif isinstance(item, Exception):
                    failure = failure or item
                else:
                    meta, payload, buffers = item
                    if failure is None:
                        yield meta, payload
                    if buffers is not None and isinstance(payload, memoryview):
                        buffers.give_back(payload)
            for t in threads:
                t.join()
        finally:
            for buffers in pools.values():
                buffers.close()  # a pump waiting for a buffer stops
        if failure is not None:
            raise failure

    def _fetch_one(self, meta: ShardMeta) -> FetchedShard:
        data, outcome = self._store.get(meta)
        # the client checked the payload against the manifest's crc32
        decoded = decode_shard(data, shard_id=meta.shard_id, verified=True)
        return FetchedShard(
            meta=meta, served_by=outcome.served_by, key_groups=dict(decoded.key_groups)
        )
