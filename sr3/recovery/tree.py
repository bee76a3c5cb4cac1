"""Tree-structured recovery: holders in a k-ary tree merge deltas on the way to R.

R assigns each shard to its least-loaded live holder, lays those holders out in
ring order as a k-ary heap (node ``i``'s children are ``k*i+1 .. k*i+k``, with
``k = sr3.recovery.tree.fanout``) and sends ``relay_tree`` to the root, node 0.
Each node asks its children for their subtrees and reads its own shards.

Every node emits pieces in ascending key-group order. A node therefore merges as
the streams arrive: once every source (its own shards and each child) has moved
past key group ``g``, all pieces of ``g`` are in, and it folds the runs of
adjacent epochs (base plus deltas become one FULL blob; overwritten and deleted
entries are dropped), then forwards them up. Pieces carry their epoch range, and
only runs of consecutive epochs of the key group's chain are folded, so deltas
are never applied out of order. The root streams the merged result to R.

A child that fails mid-stream is re-planned around: its parent discards the
child's pieces of the key group in progress, reports it ``lost`` and adopts the
child's own children, asking them to resume from that key group. Only the failed
node's own shards stay missing; R fetches them afterwards.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sr3.errors import CodecError, NodeUnavailableError, ProtocolError, StorageError
from sr3.manifest import ShardMeta
from sr3.recovery.base import (
    RecoveryStrategy,
    TransferJob,
    assign_least_loaded,
    ring_order,
)
from sr3.recovery.frames import FrameSender, RelayFaults, RelayNode, parse_nodes
from sr3.recovery.pieces import ChainIndex, Piece, merge_pieces, pieces_of_shard
from sr3.recovery.transport import RelayStream, Upstream
from sr3.server import Connection, require
from sr3.storage import ReplicaStore, crc32

__all__ = ["TreeRecovery", "children_of", "serve_tree"]

logger = logging.getLogger(__name__)

OP = "relay_tree"
_QUEUE_PIECES = 8  # pieces read ahead per child: the bound on a child's buffer
_MERGE_IN_THREAD_BYTES = 256 * 1024


def children_of(index: int, fanout: int, count: int) -> list[int]:
    """Return the tree indices of node ``index``'s children in a k-ary heap."""
    first = fanout * index + 1
    return list(range(first, min(first + fanout, count)))


def _piece_of(frame: dict[str, Any], where: str) -> Piece:
    kg, lo, hi = frame.get("kg"), frame.get("lo"), frame.get("hi")
    data, crc = frame.get("data"), frame.get("crc")
    if not (
        isinstance(kg, int)
        and isinstance(lo, int)
        and isinstance(hi, int)
        and isinstance(data, bytes)
        and isinstance(crc, int)
    ):
        msg = f"{where}: malformed piece frame"
        raise ProtocolError(msg)
    if crc32(data) != crc:
        msg = f"{where}: piece of key group {kg} epochs {lo}..{hi} fails its crc32"
        raise ProtocolError(msg)
    return Piece(kg, lo, hi, data)


class TreeRecovery(RecoveryStrategy):
    """A k-ary tree of holders merging on the way to R (see module docs)."""

    name = "tree"

    def transfer(self, job: TransferJob) -> None:
        """Receive the job's shards, merged, from the root of a holder tree."""
        usable = job.usable()
        assigned, orphans = assign_least_loaded(job.shards, usable)
        for shard in orphans:
            logger.warning("tree: shard %s has no live holder left", shard.shard_id)
        if not assigned:
            return
        order = ring_order(list(assigned))
        fanout = self.context.recovery.tree_fanout
        nodes = [
            RelayNode(
                n,
                usable[n].host,
                usable[n].port,
                tuple(s.shard_id for s in assigned[n]),
            )
            for n in order
        ]
        edges = [[order[i], order[(i - 1) // fanout]] for i in range(1, len(order))]
        job.structure = {
            "nodes": order,
            "edges": [*edges, [order[0], "R"]],
            "fanout": fanout,
            "assignment": {n.node_id: list(n.shards) for n in nodes},
        }
        job.emit("plan", mechanism=self.name, structure=job.structure)
        request = {
            "op": OP,
            "owner": job.owner,
            "nodes": [n.to_wire() for n in nodes],
            "index": 0,
            "fanout": fanout,
            "from_kg": 0,
            "chains": job.assembly.chains.to_wire(),
        }
        root = nodes[0]
        where = f"tree root {root.node_id}"
        try:
            with RelayStream(
                root.host, root.port, request, config=self.context.node_config
            ) as stream:
                for frame in stream.frames():
                    kind = frame.get("t")
                    if kind == "piece":
                        piece = _piece_of(frame, where)
                        job.assembly.add_piece(piece)
                        job.delivered(root.node_id, len(piece.blob))
                    elif kind == "lost":
                        job.lost_frame(frame)
        except StorageError as exc:
            logger.warning("tree: root %s failed: %s", root.node_id, exc)
            job.lost(root.node_id, str(exc))


class _Source:
    """Pieces in ascending key-group order: a node's own shards or a child."""

    def __init__(self, name: str, index: int | None) -> None:
        self.name = name
        self.index = index

    async def next(self) -> Piece | None:
        """Return the next piece, or None at the end.

        Raises:
            NodeUnavailableError: the source failed.
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Release the source."""


class _OwnSource(_Source):
    def __init__(self, pieces: list[Piece]) -> None:
        super().__init__("own", None)
        self._pieces = sorted(pieces, key=lambda p: (p.kg, p.lo))
        self._at = 0

    async def next(self) -> Piece | None:
        if self._at == len(self._pieces):
            return None
        self._at += 1
        return self._pieces[self._at - 1]


class _ChildSource(_Source):
    """A child's stream, read ahead by a task into a bounded queue."""

    def __init__(
        self, node: RelayNode, index: int, request: dict[str, Any], sender: FrameSender
    ) -> None:
        super().__init__(node.node_id, index)
        self._node = node
        self._request = request
        self._sender = sender
        self._queue: asyncio.Queue[Piece | Exception | None] = asyncio.Queue(
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
                frame = await self._upstream.next()
                kind = frame.get("t")
                if kind == "piece":
                    await self._queue.put(_piece_of(frame, where))
                elif kind == "lost":
                    # pass failures below us straight to R, as they happen
                    fields: dict[str, Any] = {
                        k: frame[k]
                        for k in ("t", "node", "shard", "error")
                        if k in frame
                    }
                    await self._sender.send(fields)
                elif kind == "end":
                    await self._queue.put(None)
                    return
        except (StorageError, ProtocolError) as exc:
            await self._queue.put(NodeUnavailableError(str(exc)))

    async def next(self) -> Piece | None:
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
        self.heads: dict[_Source, Piece] = {}

    def _child(self, index: int, from_kg: int) -> _ChildSource:
        ask = {**self.request, "index": index, "from_kg": from_kg}
        ask.pop("v", None)
        source = _ChildSource(self.nodes[index], index, ask, self.sender)
        source.start(self.conn)
        return source

    async def _own(self) -> _OwnSource:
        pieces: list[Piece] = []
        for sid in self.nodes[self.index].shards:
            epoch = self.chains.epoch_of(sid)
            try:
                if epoch is None:
                    msg = f"shard {sid} is not in the chain of this relay"
                    raise ProtocolError(msg)
                _, data = await asyncio.to_thread(self.store.read, sid)
                meta = ShardMeta(sid, self.owner, epoch, len(data), 0)
                # store.read checked the replica against its crc32
                pieces += pieces_of_shard(
                    data, meta, min_kg=self.from_kg, verified=True
                )
            except (StorageError, CodecError) as exc:
                fields = {"t": "lost", "shard": sid, "node": self.conn.node_id}
                await self.sender.send({**fields, "error": str(exc)})
        return _OwnSource(pieces)

    async def run(self) -> None:
        children = [
            self._child(i, self.from_kg)
            for i in children_of(self.index, self.fanout, len(self.nodes))
        ]
        sources: list[_Source] = [await self._own(), *children]
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
            piece = await source.next()
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
        if piece is None:
            await source.close()
        elif piece.kg < current_kg:
            msg = f"{OP}: {source.name} sent key group {piece.kg} after {current_kg}"
            raise ProtocolError(msg)
        else:
            self.heads[source] = piece
        return False

    async def _merge_next(self) -> None:
        current = min(p.kg for p in self.heads.values())
        bucket: dict[_Source, list[Piece]] = {}
        while True:
            at_current = [s for s, p in self.heads.items() if p.kg == current]
            if not at_current:
                break
            for source in at_current:
                bucket.setdefault(source, []).append(self.heads.pop(source))
                if await self._advance(source, current):
                    # the failed child's part of this key group may be partial:
                    # drop it; its adopted children resend from this key group
                    bucket.pop(source, None)
        pieces = [p for part in bucket.values() for p in part]
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
