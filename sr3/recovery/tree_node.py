"""Tree-structured recovery, a node's side: merge own shards and children's pieces.

See :mod:`sr3.recovery.tree` for the structure. A node serving ``relay_tree``
reads its own shards lazily, in key-group order, asks each child for its subtree,
and folds every key group once all its sources have moved past it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sr3.checksum import crc32
from sr3.errors import (
    ChecksumError,
    CodecError,
    NodeUnavailableError,
    ProtocolError,
    StorageError,
)
from sr3.manifest import ShardMeta
from sr3.recovery.frames import FrameSender, RelayFaults, RelayNode, parse_nodes
from sr3.recovery.pieces import ChainIndex, Piece, merge_pieces, pieces_of_shard
from sr3.recovery.tree import OP, check_piece, children_of, piece_of
from sr3.recovery.upstream import RawFrame, Upstream
from sr3.server import Connection, require
from sr3.storage import ReplicaStore

__all__ = ["serve_tree"]

logger = logging.getLogger(__name__)

_QUEUE_PIECES = 8  # pieces read ahead per child: the bound on a child's buffer
_MERGE_IN_THREAD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class _Held:
    """A piece at the head of a source, with what forwarding or merging it needs.

    Attributes:
        piece: The piece.
        crc: Its frame's crc32, unchecked (None for own pieces: their replica
            was checked when read).
        frame: The frame it arrived in, to forward unchanged (None for own).
    """

    piece: Piece
    crc: int | None = None
    frame: RawFrame | None = None


def _read_replica(store: ReplicaStore, sid: str) -> memoryview:
    """Read a replica's payload into a writable buffer and check its crc32.

    Like ``store.read``, but the pieces cut from a writable buffer get their own
    crc32 computed by the fast path of :func:`sr3.checksum.crc32` (read-only
    ``bytes`` slices fall back to zlib, the largest cost of a node's own pieces).

    Raises:
        StorageError: the replica is missing or cannot be read.
        ChecksumError: it fails its crc32 or is truncated.
    """
    with store.open_reader(sid, verify=False) as reader:
        size, crc = reader.info.size, reader.info.crc32
        data = bytearray(size)
        got, fd, start = 0, reader.fileno(), reader.offset
        with memoryview(data) as view:
            while got < size:
                try:
                    n = os.preadv(fd, [view[got:]], start + got)
                except OSError as exc:
                    msg = f"replica of shard {sid!r} cannot be read: {exc}"
                    raise StorageError(msg) from exc
                if n == 0:
                    msg = f"replica of shard {sid!r} ends {size - got} bytes early"
                    raise ChecksumError(msg)
                got += n
    if crc32(data) != crc:
        msg = (
            f"replica of shard {sid!r} fails its crc32 {crc:#010x}; the file is "
            "kept until repair overwrites it from another replica"
        )
        raise ChecksumError(msg)
    return memoryview(data)


class _Source:
    """Pieces in ascending key-group order: a node's own shards or a child."""

    def __init__(self, name: str, index: int | None) -> None:
        self.name = name
        self.index = index

    async def next(self) -> _Held | None:
        """Return the next piece, or None at the end.

        Raises:
            NodeUnavailableError: the source failed.
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Release the source."""


class _OwnSource(_Source):
    """This node's own shards, each read only when the merge reaches its key groups.

    Args:
        shards: ``(first key group, shard id)`` of each own shard.
        load: Reads a shard and returns its pieces (none if it failed).
    """

    def __init__(
        self,
        shards: list[tuple[int, str]],
        load: Callable[[str], Awaitable[list[Piece]]],
    ) -> None:
        super().__init__("own", None)
        self._pending = sorted(shards)
        self._load = load
        self._heap: list[tuple[int, int, int, Piece]] = []
        self._seq = 0

    async def next(self) -> _Held | None:
        # a shard starting at or before the smallest piece held may hold smaller
        while self._pending and (
            not self._heap or self._pending[0][0] <= self._heap[0][0]
        ):
            _, sid = self._pending.pop(0)
            for piece in await self._load(sid):
                self._seq += 1
                heapq.heappush(self._heap, (piece.kg, piece.lo, self._seq, piece))
        if not self._heap:
            return None
        return _Held(heapq.heappop(self._heap)[3])


class _ChildSource(_Source):
    """A child's stream, read ahead by a task into a bounded queue."""

    def __init__(
        self, node: RelayNode, index: int, request: dict[str, Any], sender: FrameSender
    ) -> None:
        super().__init__(node.node_id, index)
        self._node = node
        self._request = request
        self._sender = sender
        self._queue: asyncio.Queue[_Held | Exception | None] = asyncio.Queue(
            _QUEUE_PIECES
        )
        self._task: asyncio.Task[None] | None = None
        self._upstream: Upstream | None = None

    def start(self, conn: Connection) -> None:
        self._task = asyncio.create_task(self._read(conn))

    async def _read(self, conn: Connection) -> None:
        where = f"{OP} child {self._node.node_id}"
        try:
            self._upstream = await Upstream.open(self._node, self._request, conn.config)
            while True:
                raw = await self._upstream.next_raw()
                frame = raw.fields
                kind = frame.get("t")
                if kind == "piece":
                    blob = raw.blob if raw.blob is not None else frame.get("data")
                    piece, crc = piece_of(frame, blob, where)
                    await self._queue.put(_Held(piece, crc, raw))
                elif kind == "lost":
                    # pass failures below us straight to R, as they happen
                    await self._sender.send_encoded(raw.data)
                elif kind == "end":
                    await self._queue.put(None)
                    return
        except (StorageError, ProtocolError) as exc:
            await self._queue.put(NodeUnavailableError(str(exc)))

    async def next(self) -> _Held | None:
        item = await self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._upstream is not None:
            await self._upstream.close()


class _TreeNode:
    """One node's part of a tree relay: k-way merge by key group, then forward."""

    def __init__(
        self,
        conn: Connection,
        request: dict[str, Any],
        store: ReplicaStore,
        sender: FrameSender,
    ) -> None:
        self.conn = conn
        self.request = request
        self.store = store
        self.sender = sender
        self.nodes = parse_nodes(request, "nodes")
        self.index = require(request, "index", int)
        self.fanout = require(request, "fanout", int)
        self.from_kg = require(request, "from_kg", int)
        self.owner = require(request, "owner", str)
        self.chains = ChainIndex.from_wire(require(request, "chains", list))
        if not 0 <= self.index < len(self.nodes) or self.fanout < 2:
            msg = f"{OP}: index {self.index} / fanout {self.fanout} do not fit the tree"
            raise ProtocolError(msg)
        if self.nodes[self.index].node_id != conn.node_id:
            msg = f"{OP}: tree index {self.index} is not this node ({conn.node_id})"
            raise ProtocolError(msg)
        self.heads: dict[_Source, _Held] = {}

    def _child(self, index: int, from_kg: int) -> _ChildSource:
        ask = {**self.request, "index": index, "from_kg": from_kg}
        ask.pop("v", None)
        source = _ChildSource(self.nodes[index], index, ask, self.sender)
        source.start(self.conn)
        return source

    def _own(self) -> _OwnSource:
        shards = []
        for sid in self.nodes[self.index].shards:
            if self.chains.epoch_of(sid) is None:
                shards.append((-1, sid))  # reported lost when read, first
                continue
            kgs = [kg for kg, _ in self.chains.shard_cells(sid) if kg >= self.from_kg]
            if kgs:
                shards.append((min(kgs), sid))
        return _OwnSource(shards, self._read_own)

    async def _read_own(self, sid: str) -> list[Piece]:
        """Return an own shard's pieces from ``from_kg`` on; report it lost if bad."""
        epoch = self.chains.epoch_of(sid)
        try:
            if epoch is None:
                msg = f"shard {sid} is not in the chain of this relay"
                raise ProtocolError(msg)
            data = await asyncio.to_thread(_read_replica, self.store, sid)
            meta = ShardMeta(sid, self.owner, epoch, len(data), 0)
            return pieces_of_shard(data, meta, min_kg=self.from_kg, verified=True)
        except (StorageError, CodecError) as exc:
            fields = {"t": "lost", "shard": sid, "node": self.conn.node_id}
            await self.sender.send({**fields, "error": str(exc)})
            return []

    async def run(self) -> None:
        children = [
            self._child(i, self.from_kg)
            for i in children_of(self.index, self.fanout, len(self.nodes))
        ]
        sources: list[_Source] = [self._own(), *children]
        try:
            for source in sources:
                await self._advance(source, self.from_kg)
            while self.heads:
                await self._merge_next()
        finally:
            for source in sources:
                await source.close()
            for source in list(self.heads):
                await source.close()

    async def _advance(self, source: _Source, current_kg: int) -> bool:
        """Pull the source's next piece into ``heads``; True if it failed."""
        try:
            held = await source.next()
        except NodeUnavailableError as exc:
            await source.close()
            logger.warning("%s: child %s failed: %s", OP, source.name, exc)
            await self.sender.send(
                {"t": "lost", "node": source.name, "error": str(exc)}
            )
            if source.index is not None:
                for index in children_of(source.index, self.fanout, len(self.nodes)):
                    await self._advance(self._child(index, current_kg), current_kg)
            return True
        if held is None:
            await source.close()
        elif held.piece.kg < current_kg:
            kg = held.piece.kg
            msg = f"{OP}: {source.name} sent key group {kg} after {current_kg}"
            raise ProtocolError(msg)
        else:
            self.heads[source] = held
        return False

    async def _merge_next(self) -> None:
        current = min(h.piece.kg for h in self.heads.values())
        bucket: dict[_Source, list[_Held]] = {}
        while True:
            at_current = [s for s, h in self.heads.items() if h.piece.kg == current]
            if not at_current:
                break
            for source in at_current:
                bucket.setdefault(source, []).append(self.heads.pop(source))
                if await self._advance(source, current):
                    # the failed child's part of this key group may be partial:
                    # drop it; its adopted children resend from this key group
                    bucket.pop(source, None)
        held = [(s, h) for s, part in bucket.items() for h in part]
        if len(held) == 1 and held[0][1].frame is not None:
            frame = held[0][1].frame
            # nothing to merge with: forwarded as it came; R checks its crc32
            size = len(held[0][1].piece.blob)
            await self.sender.send_encoded(frame.data, blob_bytes=size)
            return
        pieces = await self._checked(held)
        size = sum(len(p.blob) for p in pieces)
        if len(pieces) > 1 and size > _MERGE_IN_THREAD_BYTES:
            merged = await asyncio.to_thread(merge_pieces, pieces, self.chains)
        else:
            merged = merge_pieces(pieces, self.chains)
        for piece in merged:
            fields = {
                "t": "piece",
                "kg": piece.kg,
                "lo": piece.lo,
                "hi": piece.hi,
                "crc": crc32(piece.blob),
                "from": self.conn.node_id,
            }
            await self.sender.send(fields, blob=piece.blob)

    async def _checked(self, held: list[tuple[_Source, _Held]]) -> list[Piece]:
        """Return the pieces to merge, dropping (and reporting) any failing its crc32.

        A dropped piece's cells stay missing at R, which re-fetches their shards.
        """
        pieces = []
        for source, item in held:
            if item.crc is not None:
                try:
                    check_piece(item.piece, item.crc, f"{OP} child {source.name}")
                except ProtocolError as exc:
                    logger.warning("%s", exc)
                    await self.sender.send(
                        {"t": "lost", "node": source.name, "error": str(exc)}
                    )
                    continue
            pieces.append(item.piece)
        return pieces


async def serve_tree(
    conn: Connection,
    request: dict[str, Any],
    *,
    store: ReplicaStore,
    faults: RelayFaults,
) -> None:
    """Serve ``relay_tree`` on a ring node: merge own shards with the subtree's.

    Raises:
        ProtocolError: a malformed request, or one not addressed to this node.
    """
    sender = FrameSender(conn, faults)
    node = _TreeNode(conn, request, store, sender)
    await node.run()
    await sender.send({"t": "end", "last": True})
