"""The replica ops every ring node serves: put, get, stream, has, delete, list, pull."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sr3 import wire
from sr3.checksum import crc32
from sr3.client import ClientPool
from sr3.config import NodeConfig
from sr3.connection import Connection, Handler, require, require_crc, require_shard
from sr3.errors import (
    ChecksumError,
    ProtocolError,
    ShardNotFoundError,
    SR3Error,
    StorageError,
)
from sr3.replica_file import ReplicaReader
from sr3.storage import ReplicaStore

__all__ = ["BuiltinOps", "PullSources"]

logger = logging.getLogger(__name__)

#: Whether ``(host, port)`` is the address of a current ring member, which a
#: ``pull`` may copy from. It may block (it may ask ZooKeeper); it runs in a
#: worker thread and raises :class:`~sr3.errors.SR3Error` when it cannot tell.
PullSources = Callable[[str, int], bool]

E_PULL_SOURCE = (
    "pull of shard {shard!r}: source {host}:{port} is not the address of a "
    "current ring member, and node {node} copies replicas only from ring "
    "members; pull from a holder `sr3 status` lists"
)
E_PULL_NO_MEMBERSHIP = (
    "pull of shard {shard!r}: node {node} runs without ring membership and knows "
    "no peer to copy from; start it with `sr3 node` (ZooKeeper membership) or, "
    "standalone, with --peer {host}:{port}"
)
_MAX_CRC = 0xFFFFFFFF
_THREAD_SEND_BYTES = 256 * 1024


class BuiltinOps:
    """The replica ops every node serves; blocking work runs in threads.

    Args:
        store: The node's replicas.
        node_id: The node's id, named in replies.
        config: The node's wire settings and secret.
        pull_sources: Which addresses ``pull`` may copy from (ring members);
            None refuses every pull: a node never connects to an address a
            peer names unless it is a member's.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        node_id: str,
        config: NodeConfig,
        pull_sources: PullSources | None = None,
    ):
        self.store = store
        self.node_id = node_id
        self.config = config
        self.pull_sources = pull_sources
        self.pool = ClientPool(config)  # node-to-node copies (pull)

    def handlers(self) -> dict[str, Handler]:
        """Return the op name -> handler table."""
        return {
            "put": self.put,
            "get": self.get,
            "stream": self.stream,
            "has": self.has,
            "delete": self.delete,
            "list": self.list_replicas,
            "stats": self.stats,
            "ping": self.ping,
            "pull": self.pull,
            "verify": self.verify,
        }

    def close(self) -> None:
        """Release the node-to-node client pool."""
        self.pool.close_all()

    async def put(self, conn: Connection, request: dict[str, Any]) -> None:
        """Store a replica (verifies its crc32 first)."""
        shard, crc = require_shard(request), require_crc(request)
        data = require(request, "data", bytes)
        stored = await asyncio.to_thread(self.store.put, shard, data, crc)
        await conn.ok({"stored": stored})

    async def get(self, conn: Connection, request: dict[str, Any]) -> None:
        """Send a replica (the client verifies the crc32).

        The payload is the reply's ``data`` bin, or with ``"raw": True`` in the
        request, ``raw`` (= ``size``) bytes right after the reply frame, which a
        client can receive into a buffer of its own.
        """
        shard = require_shard(request)
        if "length" in request:
            await self._get_range(conn, request, shard)
            return
        raw = require(request, "raw", bool) if "raw" in request else False

        def produce() -> tuple[dict[str, Any], ReplicaReader]:
            # The node does not checksum what it serves: the client checks the
            # payload end to end against the header's crc32 (one pass, not two),
            # so the file's pages go to the socket by sendfile, uncopied.
            reader = self.store.open_reader(shard, verify=False)
            fields = {"size": reader.info.size, "crc": reader.info.crc32}
            if raw:
                fields["raw"] = reader.info.size
            return fields, reader

        await conn.ok_file_from_thread(produce, blob_key=None if raw else "data")

    async def _get_range(
        self, conn: Connection, request: dict[str, Any], shard: str
    ) -> None:
        """Send ``length`` payload bytes from ``offset`` (one key group's blob).

        Unchecked here, as a whole get: the client checks them against the
        crc32 the shard's metadata records for that range.

        Raises:
            ProtocolError: the range is not inside the payload.
        """
        offset = require(request, "offset", int)
        length = require(request, "length", int)
        reader = await asyncio.to_thread(self.store.open_reader, shard, verify=False)
        try:
            size = reader.info.size
            if offset < 0 or length < 0 or offset + length > size:
                msg = (
                    f"get of shard {shard!r}: bytes {offset}..{offset + length} are "
                    f"not inside its {size}-byte payload; read a range its "
                    "metadata's spans name"
                )
                raise ProtocolError(msg)
            start = reader.offset + offset
            await conn.ok_file_range({"size": length}, reader.fileno(), start, length)
        finally:
            reader.close()

    async def stream(self, conn: Connection, request: dict[str, Any]) -> None:
        """Send a replica in chunks, checking its crc32 as it is read."""
        shard = require_shard(request)
        chunk_bytes = self.config.chunk_bytes
        if "chunk_bytes" in request:
            chunk_bytes = require(request, "chunk_bytes", int)
        largest = self.config.max_frame_bytes - wire.HANDSHAKE_MAX_FRAME_BYTES
        if not 1 <= chunk_bytes <= largest:
            msg = f"stream of shard {shard!r}: chunk_bytes must be 1..{largest}"
            raise ProtocolError(msg)
        reader = await asyncio.to_thread(self.store.open_reader, shard)
        head: dict[str, Any] = {"size": reader.info.size, "crc": reader.info.crc32}

        def next_chunk() -> tuple[dict[str, Any], bytes]:
            # Raises ChecksumError before the last chunk goes out if it is corrupt.
            chunk = reader.read(chunk_bytes)
            return {**head, "last": reader.done}, chunk

        try:
            while not reader.done:
                await conn.ok_from_thread(next_chunk, blob_key="chunk")
                head = {}
        finally:
            reader.close()

    async def has(self, conn: Connection, request: dict[str, Any]) -> None:
        """Say whether a replica is indexed, with its size and crc32."""
        info = self.store.has(require_shard(request))
        if info is None:
            await conn.ok({"found": False})
        else:
            await conn.ok({"found": True, "size": info.size, "crc": info.crc32})

    async def delete(self, conn: Connection, request: dict[str, Any]) -> None:
        """Remove a replica."""
        deleted = await asyncio.to_thread(self.store.delete, require_shard(request))
        await conn.ok({"deleted": deleted})

    async def list_replicas(self, conn: Connection, request: dict[str, Any]) -> None:
        """List indexed replicas, optionally by shard id prefix."""
        prefix = require(request, "prefix", str) if "prefix" in request else ""
        rows = [[i.shard_id, i.size, i.crc32] for i in self.store.list(prefix)]
        await conn.ok({"replicas": rows})

    async def stats(self, conn: Connection, request: dict[str, Any]) -> None:
        """Report replica count and bytes."""
        shards, size = len(self.store), self.store.total_bytes()
        await conn.ok({"node_id": self.node_id, "shards": shards, "bytes": size})

    async def ping(self, conn: Connection, request: dict[str, Any]) -> None:
        """Answer with the node id."""
        await conn.ok({"node_id": self.node_id})

    async def verify(self, conn: Connection, request: dict[str, Any]) -> None:
        """Re-read a replica; a corrupt one is quarantined."""
        valid = await asyncio.to_thread(self.store.verify, require_shard(request))
        await conn.ok({"valid": valid})

    async def pull(self, conn: Connection, request: dict[str, Any]) -> None:
        """Copy a replica from a ring member unless an intact one is here.

        Raises:
            ProtocolError: the source is not a current ring member's address.
            SR3Error: ring membership could not be read.
        """
        shard, crc = require_shard(request), require_crc(request)
        source = require(request, "source", dict)
        host, port = require(source, "host", str), require(source, "port", int)
        await self._check_source(shard, host, port)
        current = self.store.has(shard)
        if current is not None and current.crc32 == crc:
            if await asyncio.to_thread(self.store.verify, shard):
                await conn.ok({"stored": False})
                return
        data = await asyncio.to_thread(self._fetch, shard, host, port)
        if crc32(data) != crc:
            msg = (
                f"pull of shard {shard!r}: source {host}:{port} holds a version with "
                f"another crc32 than {crc:#010x}; pull from a holder of that version"
            )
            raise ChecksumError(msg)
        stored = await asyncio.to_thread(self.store.put, shard, data, crc)
        await conn.ok({"stored": stored})

    async def _check_source(self, shard: str, host: str, port: int) -> None:
        fields = {"shard": shard, "host": host, "port": port, "node": self.node_id}
        if self.pull_sources is None:
            raise ProtocolError(E_PULL_NO_MEMBERSHIP.format(**fields))
        try:
            member = await asyncio.to_thread(self.pull_sources, host, port)
        except SR3Error as exc:
            msg = (
                f"pull of shard {shard!r}: node {self.node_id} cannot tell whether "
                f"{host}:{port} is a ring member ({exc}); retry once ZooKeeper "
                "answers"
            )
            raise StorageError(msg) from exc
        if not member:
            raise ProtocolError(E_PULL_SOURCE.format(**fields))

    def _fetch(self, shard: str, host: str, port: int) -> bytes:
        try:
            with self.pool.client((host, port)) as client:
                return client.get(shard)
        except (ShardNotFoundError, ChecksumError):
            raise
        except StorageError as exc:  # unreachable source, auth, protocol
            msg = f"pull of shard {shard!r} from {host}:{port} failed: {exc}"
            raise StorageError(msg) from exc
