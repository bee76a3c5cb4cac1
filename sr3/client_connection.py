"""One authenticated connection to a ring node: connect, handshake, exchange frames.

:class:`ClientConnection` is the transport under :class:`sr3.client.NodeClient`:
it opens and authenticates its TCP connection on first use, sends one request
and reads its reply, and turns failures into ``sr3.errors`` exceptions whose
message names the node address, the op and the shard:

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

import logging
import select
import socket
import struct
from typing import Any

from sr3 import frame_io, wire
from sr3.config import NodeConfig
from sr3.errors import (
    AuthenticationError,
    NodeUnavailableError,
    ProtocolError,
    SR3Error,
)

__all__ = ["ClientConnection", "authenticate", "reply_field"]

logger = logging.getLogger(__name__)

_KEEP_BUFFER_BYTES = 16 * 1024 * 1024  # larger receive buffers are not kept


def reply_field(reply: dict[str, Any], name: str, kind: type, where: str) -> Any:
    """Return ``reply[name]`` if it is a ``kind``; raise ProtocolError otherwise."""
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
    hello = frame_io.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
    nonce = hello.get("nonce")
    if hello.get("v") != wire.PROTOCOL_VERSION or not isinstance(nonce, bytes):
        msg = (
            f"node {address} greeted with protocol v{hello.get('v')!r}; "
            f"this end speaks v{wire.PROTOCOL_VERSION}: upgrade both ends"
        )
        raise ProtocolError(msg)
    mac = wire.auth_mac(secret, nonce)
    frame_io.send_frame(sock, {"v": wire.PROTOCOL_VERSION, "op": "auth", "mac": mac})
    reply = frame_io.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
    if reply.get("ok") is not True:
        msg = (
            f"node {address} refused authentication: {reply.get('error')}; "
            "give every node and client the same sr3.node.secret"
        )
        raise AuthenticationError(msg)
    node_id = reply.get("node_id")
    return node_id if isinstance(node_id, str) else None


class ClientConnection:
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

    def __enter__(self) -> ClientConnection:
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
            frame_io.send_frame(sock, request, blob=blob)
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
        return frame_io.recv_frame(
            self._sock, self.config.max_frame_bytes, self._buffer
        )

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
