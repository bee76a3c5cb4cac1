"""Blocking client of a ring node's ops, and a thread-safe pool of its connections.

A :class:`NodeClient` owns one TCP connection (see :mod:`sr3.client_connection`
for how it connects and how failures map to ``sr3.errors``), is used by one
thread at a time, and offers the node's ops; its pipelined ``get_many`` lives in
:mod:`sr3.client_multiget`. :class:`ClientPool` hands idle connections to
threads.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

from sr3 import wire
from sr3.checksum import crc32
from sr3.client_connection import reply_field
from sr3.client_multiget import MultiGetClient
from sr3.config import NodeConfig
from sr3.errors import ChecksumError, NodeUnavailableError, ProtocolError, SR3Error
from sr3.ports import NodeInfo
from sr3.replica_file import ReplicaInfo

__all__ = ["ClientPool", "NodeClient"]

_FRAME_OVERHEAD = 4096  # room for the fields around a put's payload


class NodeClient(MultiGetClient):
    """One authenticated connection to a ring node and its ops (not thread-safe).

    Connects lazily; a connection found broken while idle is reopened once and
    the request retried (every op is idempotent). Timeouts come from
    ``config.connect_timeout_s`` and ``config.io_timeout_s``.
    """

    def request(
        self,
        op: str,
        fields: dict[str, Any] | None = None,
        *,
        shard_id: str | None = None,
        blob: wire.Buffer | None = None,
    ) -> dict[str, Any]:
        """Send any op (one registered with ``NodeServer.register_op``).

        Returns the single success reply; a failure reply raises as the built-in
        ops do. ``blob`` travels under the ``data`` key without a copy.

        Raises:
            StorageError: the error reply's subclass (see the module docs).
        """
        return self._call(op, shard_id, fields, blob=blob)

    def ping(self) -> str:
        """Round-trip a ping; return the node id."""
        reply = self._call("ping")
        node_id: str = reply_field(reply, "node_id", str, self._where("ping", None))
        return node_id

    def put(self, shard_id: str, data: wire.Buffer, crc32: int) -> bool:
        """Store a replica on the node; False if it already held an intact copy.

        Raises:
            ChecksumError: the node found the payload's crc32 differs.
            ProtocolError: the payload does not fit the frame bound.
            NodeUnavailableError: the node cannot be reached.
        """
        size = memoryview(data).nbytes
        if size + _FRAME_OVERHEAD > self.config.max_frame_bytes:
            msg = (
                f"{self._where('put', shard_id)}: {size} bytes do not fit the "
                f"{self.config.max_frame_bytes}-byte frame bound; raise "
                "sr3.node.max.frame.bytes or lower sr3.ring.max.shard.bytes"
            )
            raise ProtocolError(msg)
        reply = self._call("put", shard_id, {"crc": crc32}, blob=data)
        stored: bool = reply_field(reply, "stored", bool, self._where("put", shard_id))
        return stored

    def get(self, shard_id: str) -> bytes:
        """Return a replica's payload, checked end to end against its crc32.

        Raises:
            ShardNotFoundError: the node holds no replica of the shard.
            ChecksumError: the node's copy or the received bytes are corrupt.
            NodeUnavailableError: the node cannot be reached.
        """
        return self._payload(self._call("get", shard_id), self._where("get", shard_id))

    def get_range(self, shard_id: str, offset: int, length: int, crc: int) -> bytes:
        """Return ``length`` payload bytes from ``offset``, checked against ``crc``.

        One key group's blob, as the shard's metadata spans it.

        Raises:
            ShardNotFoundError: the node holds no replica of the shard.
            ChecksumError: the received bytes are not the ones the span names.
            ProtocolError: the range is not inside the payload.
            NodeUnavailableError: the node cannot be reached.
        """
        where = self._where("get", shard_id)
        reply = self._call("get", shard_id, {"offset": offset, "length": length})
        data: bytes = reply_field(reply, "data", bytes, where)
        if len(data) != length or crc32(data) != crc:
            msg = (
                f"{where}: bytes {offset}..{offset + length} fail crc32 {crc:#010x}; "
                "read another replica"
            )
            raise ChecksumError(msg)
        return data

    def stream(
        self, shard_id: str, chunk_bytes: int | None = None
    ) -> Generator[bytes, None, None]:
        """Yield a replica's payload in chunks; the crc32 is checked at the end.

        Abandoning the iterator early closes the connection.

        Raises:
            ShardNotFoundError, ChecksumError, NodeUnavailableError: as :meth:`get`.
        """
        where = self._where("stream", shard_id)
        extra = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
        reply = self._call("stream", shard_id, extra)
        size: int = reply_field(reply, "size", int, where)
        crc: int = reply_field(reply, "crc", int, where)
        received, running = 0, 0
        try:
            while True:
                chunk: bytes = reply_field(reply, "chunk", bytes, where)
                received += len(chunk)
                running = crc32(chunk, running)
                yield chunk
                if reply.get("last") is True:
                    break
                reply = self._check(self._recv_stream(where), where)
        finally:
            if self._in_flight:
                self.close()
        if received != size or running != crc:
            msg = f"{where}: received {received} bytes failing crc32 {crc:#010x}"
            raise ChecksumError(msg)

    def _recv_stream(self, where: str) -> dict[str, Any]:
        try:
            return self._recv()
        except (OSError, ProtocolError, NodeUnavailableError) as exc:
            raise self._broken(exc, where) from exc

    def has(self, shard_id: str) -> ReplicaInfo | None:
        """Return the node's replica of the shard, or None (no checksum check)."""
        where = self._where("has", shard_id)
        reply = self._call("has", shard_id)
        if not reply_field(reply, "found", bool, where):
            return None
        return ReplicaInfo(
            shard_id,
            reply_field(reply, "size", int, where),
            reply_field(reply, "crc", int, where),
        )

    def delete(self, shard_id: str) -> bool:
        """Remove the node's replica; False if it had none."""
        reply = self._call("delete", shard_id)
        deleted: bool = reply_field(
            reply, "deleted", bool, self._where("delete", shard_id)
        )
        return deleted

    def list(self, prefix: str = "") -> builtins.list[ReplicaInfo]:
        """Return the node's replicas whose shard id starts with ``prefix``."""
        where = self._where("list", None)
        reply = self._call("list", None, {"prefix": prefix})
        rows: builtins.list[Any] = reply_field(reply, "replicas", list, where)
        try:
            return [ReplicaInfo(str(s), int(n), int(c)) for s, n, c in rows]
        except (TypeError, ValueError) as exc:
            msg = f"{where}: malformed replica list: {exc}"
            raise ProtocolError(msg) from exc

    def stats(self) -> dict[str, Any]:
        """Return ``{"node_id", "shards", "bytes"}`` of the node."""
        reply = self._call("stats")
        return {k: reply.get(k) for k in ("node_id", "shards", "bytes")}

    def pull(
        self, shard_id: str, crc32: int, source_host: str, source_port: int
    ) -> bool:
        """Make the node copy a replica from another node; False if it had it.

        Raises:
            ShardNotFoundError: the source has no replica.
            ChecksumError: the source's copy is corrupt or has another crc32.
            StorageError: the source is unreachable or the copy failed.
        """
        source = {"host": source_host, "port": source_port}
        reply = self._call("pull", shard_id, {"crc": crc32, "source": source})
        stored: bool = reply_field(reply, "stored", bool, self._where("pull", shard_id))
        return stored

    def verify(self, shard_id: str) -> bool:
        """Return whether the node's replica passes its checksum.

        Raises:
            ShardNotFoundError: the node holds no replica of the shard.
        """
        reply = self._call("verify", shard_id)
        valid: bool = reply_field(reply, "valid", bool, self._where("verify", shard_id))
        return valid


class ClientPool:
    """Thread-safe idle connections per node; each is lent to one thread at a time.

    A connection comes back to the pool only when the ``with`` block left it
    reusable: an error reply such as not-found keeps it; a transport or
    protocol error, an abandoned stream or a non-SR3 exception discards it.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        max_idle_per_node: int = 8,
        factory: Callable[[str, int], NodeClient] | None = None,
    ) -> None:
        self.config = config
        self.max_idle_per_node = max_idle_per_node
        self._factory = factory or (lambda h, p: NodeClient(h, p, config=config))
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], builtins.list[NodeClient]] = {}
        self._closed = False

    @contextmanager
    def client(self, node: NodeInfo | tuple[str, int]) -> Iterator[NodeClient]:
        """Lend a connection to ``node`` (a NodeInfo or ``(host, port)``).

        It returns to the pool after the block unless the block raised anything
        but an ``SR3Error`` that left the connection reusable (an error reply
        such as not-found); otherwise it is closed.
        """
        key = (node.host, node.port) if isinstance(node, NodeInfo) else node
        with self._lock:
            idle = self._idle.get(key)
            conn = idle.pop() if idle else None
        if conn is None:
            conn = self._factory(*key)
        try:
            yield conn
        except SR3Error:
            self._give_back(key, conn)
            raise
        except BaseException:
            conn.close()
            raise
        self._give_back(key, conn)

    def _give_back(self, key: tuple[str, int], conn: NodeClient) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if conn.reusable and not self._closed:
                if len(idle) < self.max_idle_per_node:
                    idle.append(conn)
                    return
        conn.close()

    def close_all(self) -> None:
        """Close every idle connection; lent ones close when given back."""
        with self._lock:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()
