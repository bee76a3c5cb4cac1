"""Reading an owner's committed snapshot back from the ring.

:class:`SnapshotReader` fetches every shard of an epoch's chain in parallel, in
manifest order (:meth:`~SnapshotReader.fetch`) or as each arrives over one
pipelined connection per holder into reused buffers (:meth:`~SnapshotReader.stream`).
Recovery into a process (star, line, tree) is :mod:`sr3.recovery`'s.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice

from sr3.codec import decode_shard
from sr3.errors import ChecksumError, CoordinationError, RecoveryError, StorageError
from sr3.manifest import Manifest, ShardMeta
from sr3.ports import ManifestStore
from sr3.replication import ReplicatedStore

__all__ = ["FetchedShard", "SnapshotReader"]

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]


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
