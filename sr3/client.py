"""Blocking client of a ring node, and a thread-safe pool of its connections.

A :class:`NodeClient` owns one TCP connection, opened and authenticated on first
use, and is used by one thread at a time; :class:`ClientPool` hands idle
connections to threads. Failures become ``sr3.errors`` exceptions whose message
names the node address, the op and the shard:

- reply code ``not_found`` -> ShardNotFoundError, ``corrupt`` -> ChecksumError
  (also raised when received bytes fail their crc32), ``auth`` ->
  AuthenticationError, ``internal`` -> StorageError, the other codes
  (``bad_frame``, ``too_large``, ``unknown_op``, ``bad_request``) ->
  ProtocolError;
- connection refused, reset, closed or timed out -> NodeUnavailableError.

An error reply leaves the connection usable; a transport or protocol failure
closes it.
"""

from __future__ import annotations

import builtins
import logging
import select
import socket
import struct
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, overload

from sr3 import wire
from sr3.checksum import crc32
from sr3.config import NodeConfig
from sr3.errors import (
    AuthenticationError,
    ChecksumError,
    NodeUnavailableError,
    ProtocolError,
    SR3Error,
)
from sr3.ports import NodeInfo
from sr3.replica_file import ReplicaInfo

__all__ = ["ClientPool", "Into", "NodeClient", "authenticate"]

logger = logging.getLogger(__name__)

_KEEP_BUFFER_BYTES = 16 * 1024 * 1024  # larger receive buffers are not kept
_FRAME_OVERHEAD = 4096  # room for the fields around a put's payload
# get_many(into=...) checks a payload in pieces this large, each still cached
_RECV_PIECE_BYTES = 1024 * 1024

Into = Callable[[int], memoryview]
"""Given a payload's size, return a writable memoryview of exactly that size."""


def _field(reply: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = reply.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        msg = f"{where}: reply field {name!r} is not a {kind.__name__}"
        raise ProtocolError(msg)
    return value


def authenticate(sock: socket.socket, address: str, secret: str) -> str | None:
    """Answer a node's HMAC challenge on a fresh socket; return the node's id.

    Raises:
        ProtocolError: the node speaks another protocol version.
        AuthenticationError: the node refused the secret.
    """
    hello = wire.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
    nonce = hello.get("nonce")
    if hello.get("v") != wire.PROTOCOL_VERSION or not isinstance(nonce, bytes):
        msg = (
            f"node {address} greeted with protocol v{hello.get('v')!r}; "
            f"this end speaks v{wire.PROTOCOL_VERSION}: upgrade both ends"
        )
        raise ProtocolError(msg)
    mac = wire.auth_mac(secret, nonce)
    wire.send_frame(sock, {"v": wire.PROTOCOL_VERSION, "op": "auth", "mac": mac})
    reply = wire.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
    if reply.get("ok") is not True:
        msg = (
            f"node {address} refused authentication: {reply.get('error')}; "
            "give every node and client the same sr3.node.secret"
        )
        raise AuthenticationError(msg)
    node_id = reply.get("node_id")
    return node_id if isinstance(node_id, str) else None


class NodeClient:
    """One authenticated connection to a ring node (not thread-safe).

    Connects lazily; a connection found broken while idle is reopened once and
    the request retried (every op is idempotent). Timeouts come from
    ``config.connect_timeout_s`` and ``config.io_timeout_s``.
    """

    def __init__(self, host: str, port: int, *, config: NodeConfig) -> None:
        self.host = host
        self.port = port
        self.config = config
        self.node_id: str | None = None
        self._sock: socket.socket | None = None
        self._buffer: bytearray | None = None
        self._in_flight = False

    @property
    def address(self) -> str:
        """``host:port`` of the node."""
        return f"{self.host}:{self.port}"

    @property
    def reusable(self) -> bool:
        """Whether the connection is open with no request or stream in flight."""
        return self._sock is not None and not self._in_flight

    def close(self) -> None:
        """Close the connection (the next call reconnects)."""
        sock, self._sock = self._sock, None
        self._in_flight = False
        if sock is not None:
            sock.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _where(self, op: str, shard_id: str | None) -> str:
        shard = "" if shard_id is None else f" of shard {shard_id!r}"
        return f"node {self.address}: {op}{shard}"

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(
            (self.host, self.port), timeout=self.config.connect_timeout_s
        )
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Kernel timeouts on a blocking socket, not settimeout(): Python's
            # timeout mode makes the socket non-blocking, which defeats
            # MSG_WAITALL and costs a poll() per recv.
            sock.settimeout(None)
            seconds = int(self.config.io_timeout_s)
            micros = int((self.config.io_timeout_s - seconds) * 1e6)
            timeval = struct.pack("ll", seconds, micros)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            self.node_id = authenticate(sock, self.address, self.config.secret)
        except BaseException:
            sock.close()
            raise
        return sock

    @staticmethod
    def _idle_socket_broken(sock: socket.socket) -> bool:
        # An idle connection has nothing to read; readable means EOF or reset.
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))

    def _exchange(
        self, request: dict[str, Any], blob: wire.Buffer | None, *, retry: bool = True
    ) -> dict[str, Any]:
        """Send one request and read its first reply frame, reconnecting once."""
        sock = self._sock
        if sock is not None and self._idle_socket_broken(sock):
            self.close()
            sock = None
        reused = sock is not None
        if sock is None:
            sock = self._sock = self._connect()
        self._in_flight = True
        try:
            wire.send_frame(sock, request, blob=blob)
            return self._recv()
        except (NodeUnavailableError, ConnectionError):
            self.close()
            if not (reused and retry):
                raise
        logger.info("node %s: idle connection broke, reconnecting", self.address)
        return self._exchange(request, blob, retry=False)

    def _recv(self) -> dict[str, Any]:
        if self._sock is None:
            msg = f"node {self.address}: connection closed while a reply was due"
            raise NodeUnavailableError(msg)
        if self._buffer is None or len(self._buffer) > _KEEP_BUFFER_BYTES:
            self._buffer = bytearray()
        return wire.recv_frame(self._sock, self.config.max_frame_bytes, self._buffer)

    def _call(
        self,
        op: str,
        shard_id: str | None = None,
        fields: dict[str, Any] | None = None,
        *,
        blob: wire.Buffer | None = None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"v": wire.PROTOCOL_VERSION, "op": op}
        if shard_id is not None:
            request["shard"] = shard_id
        request.update(fields or {})
        where = self._where(op, shard_id)
        try:
            reply = self._exchange(request, blob)
        except (OSError, ProtocolError, NodeUnavailableError) as exc:
            raise self._broken(exc, where) from exc
        return self._check(reply, where)

    def _broken(self, exc: BaseException, where: str) -> SR3Error:
        """Close the connection; return the error to raise for a transport failure."""
        self.close()
        # BlockingIOError is how SO_RCVTIMEO/SO_SNDTIMEO report a timeout.
        if isinstance(exc, TimeoutError | BlockingIOError):
            msg = f"{where} got no answer within {self.config.io_timeout_s}s"
            return NodeUnavailableError(msg)
        if isinstance(exc, ProtocolError):
            return ProtocolError(f"{where}: {exc}")
        return NodeUnavailableError(f"{where} failed: {exc}; is the node running?")

    def _check(self, reply: dict[str, Any], where: str) -> dict[str, Any]:
        ok = reply.get("ok")
        if ok is True:
            if not reply.get("last", True):
                return reply  # a stream continues: stay in flight
            self._in_flight = False
            return reply
        code, error = reply.get("code"), reply.get("error")
        if ok is not False or not isinstance(code, str):
            self.close()
            msg = f"{where}: malformed reply without ok/code"
            raise ProtocolError(msg)
        self._in_flight = False
        if code in ("bad_frame", "too_large", "auth"):
            self.close()  # the node closes the connection after these
        msg = f"{where} failed ({code}): {error}"
        raise wire.error_type(code, ProtocolError)(msg)

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
        node_id: str = _field(reply, "node_id", str, self._where("ping", None))
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
        stored: bool = _field(reply, "stored", bool, self._where("put", shard_id))
        return stored

    def get(self, shard_id: str) -> bytes:
        """Return a replica's payload, checked end to end against its crc32.

        Raises:
            ShardNotFoundError: the node holds no replica of the shard.
            ChecksumError: the node's copy or the received bytes are corrupt.
            NodeUnavailableError: the node cannot be reached.
        """
        return self._payload(self._call("get", shard_id), self._where("get", shard_id))

    @staticmethod
    def _payload(reply: dict[str, Any], where: str) -> bytes:
        data: bytes = _field(reply, "data", bytes, where)
        crc: int = _field(reply, "crc", int, where)
        if len(data) != _field(reply, "size", int, where) or crc32(data) != crc:
            msg = (
                f"{where}: received bytes fail crc32 {crc:#010x}; read another replica"
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
        size: int = _field(reply, "size", int, where)
        crc: int = _field(reply, "crc", int, where)
        received, running = 0, 0
        try:
            while True:
                chunk: bytes = _field(reply, "chunk", bytes, where)
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

    @overload
    def get_many(
        self, shard_ids: Iterable[str], *, window: int = ..., into: None = ...
    ) -> Generator[tuple[str, bytes], None, None]: ...

    @overload
    def get_many(
        self, shard_ids: Iterable[str], *, window: int = ..., into: Into
    ) -> Generator[tuple[str, memoryview], None, None]: ...

    def get_many(
        self, shard_ids: Iterable[str], *, window: int = 4, into: Into | None = None
    ) -> Generator[tuple[str, bytes | memoryview], None, None]:
        """Yield ``(shard_id, payload)`` in order, pipelining up to ``window`` gets.

        While the caller checks one payload the node already reads the next, so
        one connection moves about twice the bytes of sequential :meth:`get`
        calls. Payloads are checked as :meth:`get` does. Any failure, or leaving
        the iterator early, closes the connection (replies are still queued).

        With ``into``, each payload of ``n`` bytes is received straight into
        ``into(n)``, a writable memoryview of exactly ``n`` bytes, and that view is
        yielded: no allocation per payload, and its crc32 is computed piece by
        piece as it arrives, while the bytes are still in the CPU cache.

        Raises:
            ShardNotFoundError, ChecksumError, NodeUnavailableError: as :meth:`get`.
        """
        pending = list(shard_ids)
        if not pending:
            return
        first = self._where("get", pending[0])
        try:
            if self._sock is not None and self._idle_socket_broken(self._sock):
                self.close()
            sock = self._sock = self._sock or self._connect()
        except (OSError, ProtocolError, NodeUnavailableError) as exc:
            raise self._broken(exc, first) from exc
        sent = received = 0
        ask: dict[str, Any] = {"v": wire.PROTOCOL_VERSION, "op": "get"}
        if into is not None:
            ask["raw"] = True
        try:
            for shard_id in pending:
                where = self._where("get", shard_id)
                try:
                    while sent < len(pending) and sent - received < window:
                        wire.send_frame(sock, {**ask, "shard": pending[sent]})
                        sent += 1
                        self._in_flight = True
                    reply = self._recv()
                    received += 1
                except (OSError, ProtocolError, NodeUnavailableError) as exc:
                    raise self._broken(exc, where) from exc
                reply = self._check(reply, where)
                if into is None:
                    self._in_flight = received < sent
                    yield shard_id, self._payload(reply, where)
                    continue
                try:
                    view = self._payload_into(sock, reply, into, where)
                except ChecksumError:
                    raise  # every byte was read: the connection stays in step
                except BaseException:
                    self.close()  # raw bytes may be left unread
                    raise
                self._in_flight = received < sent
                yield shard_id, view
        finally:
            if received < sent:
                self.close()

    def _payload_into(
        self, sock: socket.socket, reply: dict[str, Any], into: Into, where: str
    ) -> memoryview:
        """Receive the raw payload following ``reply`` into ``into(n)``; check it."""
        size: int = _field(reply, "size", int, where)
        crc: int = _field(reply, "crc", int, where)
        data = reply.get("data")
        if isinstance(data, bytes):  # the node framed it (it ignored "raw")
            target = into(len(data))
            target[:] = data
            actual = crc32(target)
        else:
            raw: int = _field(reply, "raw", int, where)
            if raw != size or not 0 <= raw <= self.config.max_frame_bytes:
                self.close()
                msg = (
                    f"{where}: reply announces {raw} raw bytes for a {size}-byte "
                    f"payload (bound {self.config.max_frame_bytes})"
                )
                raise ProtocolError(msg)
            target = into(raw)
            if target.nbytes != raw or target.readonly:
                self.close()
                msg = f"{where}: into({raw}) gave no writable {raw}-byte buffer"
                raise ValueError(msg)
            try:
                actual = self._recv_checked(sock, target)
            except (OSError, NodeUnavailableError) as exc:
                raise self._broken(exc, where) from exc
        if target.nbytes != size or actual != crc:
            msg = (
                f"{where}: received bytes fail crc32 {crc:#010x}; read another replica"
            )
            raise ChecksumError(msg)
        return target

    @staticmethod
    def _recv_checked(sock: socket.socket, target: memoryview) -> int:
        """Fill ``target`` from ``sock``; return the crc32 of what arrived."""
        running, got, size = 0, 0, target.nbytes
        while got < size:
            with target[got : got + _RECV_PIECE_BYTES] as piece:
                filled = 0
                while filled < piece.nbytes:
                    with piece[filled:] as rest:
                        n = sock.recv_into(rest, 0, socket.MSG_WAITALL)
                    if n == 0:
                        msg = f"connection closed {size - got - filled} bytes early"
                        raise NodeUnavailableError(msg)
                    filled += n
                running = crc32(piece, running)
            got += filled
        return running

    def has(self, shard_id: str) -> ReplicaInfo | None:
        """Return the node's replica of the shard, or None (no checksum check)."""
        where = self._where("has", shard_id)
        reply = self._call("has", shard_id)
        if not _field(reply, "found", bool, where):
            return None
        return ReplicaInfo(
            shard_id,
            _field(reply, "size", int, where),
            _field(reply, "crc", int, where),
        )

    def delete(self, shard_id: str) -> bool:
        """Remove the node's replica; False if it had none."""
        reply = self._call("delete", shard_id)
        deleted: bool = _field(reply, "deleted", bool, self._where("delete", shard_id))
        return deleted

    def list(self, prefix: str = "") -> builtins.list[ReplicaInfo]:
        """Return the node's replicas whose shard id starts with ``prefix``."""
        where = self._where("list", None)
        reply = self._call("list", None, {"prefix": prefix})
        rows: builtins.list[Any] = _field(reply, "replicas", list, where)
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
        stored: bool = _field(reply, "stored", bool, self._where("pull", shard_id))
        return stored

    def verify(self, shard_id: str) -> bool:
        """Return whether the node's replica passes its checksum.

        Raises:
            ShardNotFoundError: the node holds no replica of the shard.
        """
        reply = self._call("verify", shard_id)
        valid: bool = _field(reply, "valid", bool, self._where("verify", shard_id))
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
