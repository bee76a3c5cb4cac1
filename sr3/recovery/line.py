"""Line-structured recovery: holders chained in ring order, one stream into R.

R assigns each shard to its least-loaded live holder, orders those holders by
ring position ``h1 .. hn`` and sends ``relay_line`` with the chain to ``hn``, the
chain's end. Each node ``hi`` asks ``hi-1`` for the rest of the chain, then sends
its own shards in chunks while forwarding every frame arriving from upstream as it
arrives: the chain is pipelined, each hop holds at most a frame, and a slow link
pushes back through ``drain``. R receives one stream.

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

from sr3.errors import ChecksumError, CodecError, ProtocolError, StorageError
from sr3.recovery.base import (
    RecoveryStrategy,
    TransferJob,
    assign_least_loaded,
    ring_order,
)
from sr3.recovery.frames import (
    FrameSender,
    RelayFaults,
    RelayNode,
    parse_nodes,
    shard_list,
)
from sr3.recovery.transport import RelayStream, Upstream
from sr3.server import Connection, require
from sr3.storage import ReplicaStore, crc32

__all__ = ["LineRecovery", "serve_line"]

logger = logging.getLogger(__name__)

OP = "relay_line"
_NOT_FORWARDED = ("v", "ok", "data")


@dataclass
class _Partial:
    buffer: bytearray
    crc: int
    source: str


class LineRecovery(RecoveryStrategy):
    """A pipelined chain of holders ending in R (see module docs)."""

    name = "line"

    def transfer(self, job: TransferJob) -> None:
        """Receive the job's shards through one chain of its holders."""
        usable = job.usable()
        assigned, orphans = assign_least_loaded(job.shards, usable)
        for shard in orphans:
            logger.warning("line: shard %s has no live holder left", shard.shard_id)
        if not assigned:
            return
        order = ring_order(list(assigned))
        chain = [
            RelayNode(
                n,
                usable[n].host,
                usable[n].port,
                tuple(s.shard_id for s in assigned[n]),
            )
            for n in order
        ]
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
            "chunk_bytes": self.context.node_config.chunk_bytes,
        }
        end = chain[-1]
        partial: dict[str, _Partial] = {}
        try:
            with RelayStream(
                end.host, end.port, request, config=self.context.node_config
            ) as stream:
                for frame in stream.frames():
                    kind = frame.get("t")
                    if kind == "shard":
                        self._on_chunk(job, frame, partial)
                    elif kind == "lost":
                        job.lost_frame(frame)
        except StorageError as exc:
            logger.warning("line: chain end %s failed: %s", end.node_id, exc)
            job.lost(end.node_id, str(exc))

    def _on_chunk(
        self, job: TransferJob, frame: dict[str, Any], partial: dict[str, _Partial]
    ) -> None:
        sid, off, data = frame.get("shard"), frame.get("off"), frame.get("data")
        meta = job.assembly.metas.get(sid) if isinstance(sid, str) else None
        if meta is None or not isinstance(off, int) or not isinstance(data, bytes):
            logger.warning("line: ignoring a malformed chunk frame of %r", sid)
            return
        if off == 0:
            partial[meta.shard_id] = _Partial(bytearray(), 0, str(frame.get("from")))
        part = partial.get(meta.shard_id)
        if part is None or off != len(part.buffer):
            logger.warning("line: chunk of %s at %s out of order; dropped", sid, off)
            return
        part.buffer += data
        part.crc = crc32(data, part.crc)
        if not frame.get("end"):
            return
        del partial[meta.shard_id]
        if len(part.buffer) != meta.size or part.crc != meta.crc32:
            logger.warning(
                "line: %s from %s fails the manifest's size/crc32; re-fetched later",
                sid,
                part.source,
            )
            return
        try:
            data = memoryview(part.buffer)
            job.assembly.add_shard(meta.shard_id, data, crc_checked=True)
        except (ChecksumError, CodecError) as exc:
            logger.warning("line: %s from %s is corrupt: %s", sid, part.source, exc)
            job.found_corrupt(part.source, meta.shard_id)
            return
        job.delivered(part.source, meta.size)


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
    for sid in shards:
        try:
            reader = await asyncio.to_thread(store.open_reader, sid)
        except StorageError as exc:
            await sender.send(
                {"t": "lost", "shard": sid, "node": node_id, "error": str(exc)}
            )
            continue
        try:
            off = 0
            while not reader.done:
                # the reader checks the crc32 on the last chunk: a corrupt replica
                # never sends its end, so R drops the partial copy
                data = await asyncio.to_thread(reader.read, chunk)
                fields = {
                    "t": "shard",
                    "shard": sid,
                    "off": off,
                    "size": reader.info.size,
                    "end": reader.done,
                    "from": node_id,
                }
                await sender.send(fields, blob=data)
                off += len(data)
        except (StorageError, CodecError) as exc:  # ChecksumError is a CodecError
            await sender.send(
                {"t": "lost", "shard": sid, "node": node_id, "error": str(exc)}
            )
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
    """Forward the upstream chain's frames; re-plan around a failed upstream."""
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
                while True:
                    frame = await upstream.next()
                    if frame.get("t") == "end":
                        return
                    fields = {k: v for k, v in frame.items() if k not in _NOT_FORWARDED}
                    await sender.send(fields, blob=frame.get("data"))
                    if frame.get("t") == "shard" and frame.get("end"):
                        forwarded.add(str(frame.get("shard")))
            finally:
                await upstream.close()
        except StorageError as exc:
            logger.warning(
                "%s: upstream %s failed, skipping it: %s", OP, node.node_id, exc
            )
            await sender.send({"t": "lost", "node": node.node_id, "error": str(exc)})
            remaining.pop()
