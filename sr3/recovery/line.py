"""Line-structured recovery: holders chained in ring order, one stream into R.

R picks few live holders that together hold every shard (a greedy set cover,
:func:`~sr3.recovery.base.assign_covering`: each holder in the chain adds a hop
to every byte passing through it), gives each shard to the least-loaded of them,
orders them by ring position ``h1 .. hn`` and sends ``relay_line`` with the chain
to ``hn``, the chain's end. Each node ``hi`` asks ``hi-1`` for the rest of the
chain, then sends its own shards in chunks while forwarding every frame arriving
from upstream as it arrives: the chain is pipelined, each hop holds at most two
frames, and a slow link pushes back through ``drain``. R receives one stream.

No byte is re-encoded on the way. A node sends its own chunks from the replica
file by ``os.sendfile`` and forwards upstream frames exactly as they arrived,
decoding only their heads. Nothing checks a chunk in between: R receives each
chunk straight into the shard's buffer and checks the whole shard against the
manifest's size and crc32, reporting a holder whose copy fails it as corrupt.

A node whose upstream fails tells R (a ``lost`` frame) and re-plans in place: it
asks the node before the failed one for the rest of the chain, skipping shards it
already forwarded whole. Shards of the failed node itself stay missing and R
fetches them afterwards (star, from their other holders).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sr3.buffers import fresh_buffer
from sr3.checksum import crc32
from sr3.config import NodeConfig
from sr3.errors import ChecksumError, CodecError, ProtocolError, StorageError
from sr3.manifest import ShardMeta
from sr3.recovery.base import RecoveryStrategy, TransferJob
from sr3.recovery.chains import read_relay, relay_nodes
from sr3.recovery.frames import (
    FrameSender,
    RelayFaults,
    RelayNode,
    parse_nodes,
    shard_list,
)
from sr3.recovery.transport import RelayStream
from sr3.recovery.upstream import Upstream
from sr3.server import Connection, require
from sr3.storage import ReplicaStore

__all__ = ["RELAY_CHUNK_BYTES", "LineRecovery", "relay_chunk_bytes", "serve_line"]

logger = logging.getLogger(__name__)

OP = "relay_line"
#: Smallest chunk R asks a chain for (``sr3.node.chunk.bytes`` when larger, and
#: at most half the frame bound): every frame costs each hop a thread hop or two,
#: and the chain's pipeline holds two frames per hop.
RELAY_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass
class _Partial:
    meta: ShardMeta
    buffer: memoryview  # the shard's size, filled in place chunk by chunk
    filled: int
    crc: int
    source: str


class LineRecovery(RecoveryStrategy):
    """A pipelined chain of holders ending in R (see module docs)."""

    name = "line"

    def transfer(self, job: TransferJob) -> None:
        """Receive the job's shards through one chain of its holders."""
        chain = relay_nodes(job, self.name)
        if not chain:
            return
        order = [n.node_id for n in chain]
        job.structure = {
            "nodes": order,
            "edges": [[a, b] for a, b in zip(order, order[1:], strict=False)]
            + [[order[-1], "R"]],
            "assignment": {n.node_id: list(n.shards) for n in chain},
        }
        job.emit("plan", mechanism=self.name, structure=job.structure)
        request = {
            "op": OP,
            "owner": job.owner,
            "chain": [n.to_wire() for n in chain],
            "chunk_bytes": relay_chunk_bytes(self.context.node_config),
        }
        partial: dict[str, _Partial] = {}

        def on_shard(stream: RelayStream, head: dict[str, Any], size: int) -> None:
            whole = self._on_chunk(job, stream, head, size, partial)
            if whole is not None:
                self._finish(job, whole)

        read_relay(
            job,
            self.name,
            chain[-1],
            request,
            {"shard": on_shard},
            config=self.context.node_config,
        )

    def _on_chunk(
        self,
        job: TransferJob,
        stream: RelayStream,
        head: dict[str, Any],
        size: int,
        partial: dict[str, _Partial],
    ) -> _Partial | None:
        """Receive a chunk's blob into its shard's buffer; return the shard if whole."""
        sid, off = head.get("shard"), head.get("off")
        meta = job.assembly.metas.get(sid) if isinstance(sid, str) else None
        inline = head.get("data")  # a frame not in the trailing-blob layout
        if isinstance(inline, bytes):
            size = len(inline)
        malformed = inline is not None and not isinstance(inline, bytes)
        if meta is None or not isinstance(off, int) or malformed:
            logger.warning("line: ignoring a malformed chunk frame of %r", sid)
            return None
        if off == 0:
            source = str(head.get("from"))
            buffer = fresh_buffer(meta.size)
            partial[meta.shard_id] = _Partial(meta, buffer, 0, 0, source)
        part = partial.get(meta.shard_id)
        if part is None or off != part.filled or off + size > meta.size:
            logger.warning("line: chunk of %s at %s out of order; dropped", sid, off)
            partial.pop(meta.shard_id, None)
            return None
        with part.buffer[off : off + size] as view:
            if isinstance(inline, bytes):
                view[:] = inline
            else:
                stream.recv_blob_into(view)
            part.crc = crc32(view, part.crc)
        part.filled += size
        if not head.get("end"):
            return None
        del partial[meta.shard_id]
        return part

    def _finish(self, job: TransferJob, part: _Partial) -> None:
        """Add a received shard after checking it against the manifest."""
        meta = part.meta
        if part.filled != meta.size or part.crc != meta.crc32:
            # holders send their replica files unchecked: R is the check
            logger.warning(
                "line: %s from %s fails the manifest's size/crc32; re-fetched later",
                meta.shard_id,
                part.source,
            )
            job.found_corrupt(part.source, meta.shard_id)
            return
        try:
            job.assembly.add_shard(meta.shard_id, part.buffer, crc_checked=True)
        except (ChecksumError, CodecError) as exc:
            logger.warning(
                "line: %s from %s is corrupt: %s", meta.shard_id, part.source, exc
            )
            job.found_corrupt(part.source, meta.shard_id)
            return
        job.delivered(part.source, meta.size)


def relay_chunk_bytes(config: NodeConfig) -> int:
    """Return the chunk size R asks a chain for (see :data:`RELAY_CHUNK_BYTES`)."""
    largest = config.max_frame_bytes // 2
    return max(min(RELAY_CHUNK_BYTES, largest), min(config.chunk_bytes, largest))


def _chunk_bytes(request: dict[str, Any], conn: Connection) -> int:
    chunk = require(request, "chunk_bytes", int)
    largest = conn.config.max_frame_bytes // 2
    if not 4096 <= chunk <= largest:
        msg = f"{OP}: chunk_bytes {chunk} is outside 4096..{largest}"
        raise ProtocolError(msg)
    return chunk


async def serve_line(
    conn: Connection,
    request: dict[str, Any],
    *,
    store: ReplicaStore,
    faults: RelayFaults,
) -> None:
    """Serve ``relay_line`` on a ring node: own shards plus the chain upstream.

    Raises:
        ProtocolError: a malformed request, or one not addressed to this node.
    """
    chain = parse_nodes(request, "chain")
    if not chain or chain[-1].node_id != conn.node_id:
        msg = f"{OP}: the chain must end at this node ({conn.node_id})"
        raise ProtocolError(msg)
    skip = set(shard_list(request.get("skip", []), f"{OP} skip"))
    chunk = _chunk_bytes(request, conn)
    sender = FrameSender(conn, faults)
    forwarded: set[str] = set()
    upstream = None
    if len(chain) > 1:
        upstream = asyncio.create_task(
            _forward(conn, request, sender, chain[:-1], skip, forwarded)
        )
    try:
        own = [s for s in chain[-1].shards if s not in skip]
        await _send_own(conn.node_id, store, sender, own, chunk)
        if upstream is not None:
            await upstream
    finally:
        if upstream is not None and not upstream.done():
            upstream.cancel()
            await asyncio.gather(upstream, return_exceptions=True)
    await sender.send({"t": "end", "last": True})


async def _send_own(
    node_id: str,
    store: ReplicaStore,
    sender: FrameSender,
    shards: list[str],
    chunk: int,
) -> None:
    """Send own shards in chunks, each straight from its replica file."""
    for sid in shards:
        try:
            reader = await asyncio.to_thread(store.open_reader, sid)
        except (StorageError, CodecError) as exc:  # ChecksumError is a CodecError
            await sender.send(
                {"t": "lost", "shard": sid, "node": node_id, "error": str(exc)}
            )
            continue
        try:
            # opening checked the header and the file's length; R checks the crc32
            size, start, fd = reader.info.size, reader.offset, reader.fileno()
            off = 0
            while True:
                count = min(chunk, size - off)
                fields = {
                    "t": "shard",
                    "shard": sid,
                    "off": off,
                    "size": size,
                    "end": off + count == size,
                    "from": node_id,
                }
                # a file failing under sendfile breaks the frame, hence the
                # stream: R records this node lost and re-fetches the rest
                await sender.send_file(fields, fd, start + off, count)
                off += count
                if off == size:
                    break
        finally:
            reader.close()


async def _forward(
    conn: Connection,
    request: dict[str, Any],
    sender: FrameSender,
    chain: list[RelayNode],
    skip: set[str],
    forwarded: set[str],
) -> None:
    """Forward the upstream chain's frames unchanged; re-plan around a failure."""
    remaining = list(chain)
    while remaining:
        node = remaining[-1]
        ask = {
            "op": OP,
            "owner": request.get("owner"),
            "chain": [n.to_wire() for n in remaining],
            "skip": sorted(skip | forwarded),
            "chunk_bytes": request["chunk_bytes"],
        }
        try:
            upstream = await Upstream.open(node, ask, conn.config)
            try:
                await _relay(upstream, sender, forwarded)
                return
            finally:
                await upstream.close()
        except StorageError as exc:
            logger.warning(
                "%s: upstream %s failed, skipping it: %s", OP, node.node_id, exc
            )
            await sender.send({"t": "lost", "node": node.node_id, "error": str(exc)})
            remaining.pop()


async def _relay(upstream: Upstream, sender: FrameSender, forwarded: set[str]) -> None:
    """Forward frames up to the ``end`` frame exactly as they arrived.

    The next frame is received while the current one is sent: a hop holds at
    most two frames.

    Raises:
        NodeUnavailableError: the upstream failed.
    """
    reading = asyncio.ensure_future(upstream.next_raw())
    try:
        while True:
            frame = await reading
            fields = frame.fields
            if fields.get("t") == "end":
                return
            reading = asyncio.ensure_future(upstream.next_raw())
            blob = frame.blob
            size = 0 if blob is None else blob.nbytes
            await sender.send_encoded(frame.data, blob_bytes=size)
            if fields.get("t") == "shard" and fields.get("end"):
                forwarded.add(str(fields.get("shard")))
    finally:
        if not reading.done():
            reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
