"""Pipelined multi-get of replicas, received straight into caller buffers.

:class:`MultiGetClient` adds :meth:`MultiGetClient.get_many` to a
:class:`~sr3.client_connection.ClientConnection`: it keeps up to ``window`` gets
in flight on one connection and, given ``into``, receives each payload into a
buffer the caller provides, checking its crc32 piece by piece as it arrives.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Generator, Iterable
from typing import Any, overload

from sr3 import frame_io, wire
from sr3.checksum import crc32
from sr3.client_connection import ClientConnection, reply_field
from sr3.errors import ChecksumError, NodeUnavailableError, ProtocolError

__all__ = ["Into", "MultiGetClient"]

# get_many(into=...) checks a payload in pieces this large, each still cached
_RECV_PIECE_BYTES = 1024 * 1024

Into = Callable[[int], memoryview]
"""Given a payload's size, return a writable memoryview of exactly that size."""


class MultiGetClient(ClientConnection):
    """A connection that can pipeline gets and receive payloads into buffers."""

    @staticmethod
    def _payload(reply: dict[str, Any], where: str) -> bytes:
        data: bytes = reply_field(reply, "data", bytes, where)
        crc: int = reply_field(reply, "crc", int, where)
        if len(data) != reply_field(reply, "size", int, where) or crc32(data) != crc:
            msg = (
                f"{where}: received bytes fail crc32 {crc:#010x}; read another replica"
            )
            raise ChecksumError(msg)
        return data

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
                        frame_io.send_frame(sock, {**ask, "shard": pending[sent]})
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
        size: int = reply_field(reply, "size", int, where)
        crc: int = reply_field(reply, "crc", int, where)
        data = reply.get("data")
        if isinstance(data, bytes):  # the node framed it (it ignored "raw")
            target = into(len(data))
            target[:] = data
            actual = crc32(target)
        else:
            raw: int = reply_field(reply, "raw", int, where)
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
