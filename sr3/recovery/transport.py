"""Relay streams: R's blocking reader, a node's async upstream reader and frame sender.

Line and tree recovery are server ops (``relay_line``, ``relay_tree``) that answer
one request with many frames, each ``{"ok": True, "t": <type>, ...}``:

* ``shard``: a chunk of a raw shard (line): ``shard``, ``off``, ``size``, ``crc``,
  ``end`` and the bytes under ``data``;
* ``piece``: a key group folded over epochs ``lo..hi`` (tree): ``kg``, ``lo``,
  ``hi``, ``crc`` and the blob under ``data``;
* ``lost``: a node of the structure failed (``node``, ``error``) or a shard could
  not be read (``shard``): R re-fetches what is missing;
* ``end``: the stream is complete (``last``: True).

An error frame (``ok`` False) also ends a stream. Frames are forwarded as they
arrive and each send waits for the peer to drain (the server's write buffer limit
is zero), so a slow link pushes back up the whole structure instead of piling up.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from sr3 import wire
from sr3.client import authenticate
from sr3.config import NodeConfig
from sr3.errors import (
    ChecksumError,
    NodeUnavailableError,
    ProtocolError,
    SR3Error,
    StorageError,
)
from sr3.recovery.frames import RelayNode

__all__ = ["RelayStream", "ShardLink", "Upstream"]

logger = logging.getLogger(__name__)


def open_socket(host: str, port: int, config: NodeConfig) -> socket.socket:
    """Connect to a node and answer its HMAC challenge (blocking).

    Raises:
        OSError: the node cannot be reached.
        ProtocolError: the node speaks another protocol version.
        AuthenticationError: the node refused the secret.
    """
    address = f"{host}:{port}"
    sock = socket.create_connection((host, port), timeout=config.connect_timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(config.io_timeout_s)
        authenticate(sock, address, config.secret)
    except BaseException:
        sock.close()
        raise
    return sock


def _recv_into(sock: socket.socket, view: memoryview, where: str) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            msg = f"{where}: connection closed after {got} of {len(view)} bytes"
            raise NodeUnavailableError(msg)
        got += n


class ShardLink:
    """R's connection to one node for star recovery: ``get`` without extra copies.

    The reply frame is received straight into a buffer of its own, and the shard's
    bytes are returned as a view of it: one copy from the kernel, no decoding of
    the payload. The frame layout is :func:`sr3.wire.pack_frame_head`'s: the blob
    comes last, as a bin32. Integrity is checked by the caller, end to end, against
    the manifest's crc32 (``Assembly.add_shard(crc_checked=False)``).

    Args:
        host: The node's address.
        port: Its port.
        config: Secret, frame bound and timeouts.
    """

    def __init__(self, host: str, port: int, *, config: NodeConfig) -> None:
        self.address = f"{host}:{port}"
        self._host, self._port = host, port
        self._config = config
        self._sock: socket.socket | None = None

    def close(self) -> None:
        """Close the connection (the next get reconnects)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def get(self, shard_id: str, size: int) -> memoryview:
        """Return the node's replica of a shard of ``size`` bytes.

        Raises:
            NodeUnavailableError: the node cannot be reached or broke the reply.
            ShardNotFoundError: the node holds no replica.
            ChecksumError: the node found its replica corrupt.
            StorageError: any other error reply.
        """
        where = f"node {self.address}: get of shard {shard_id!r}"
        try:
            if self._sock is None:
                self._sock = open_socket(self._host, self._port, self._config)
            sock = self._sock
            request = {"v": wire.PROTOCOL_VERSION, "op": "get", "shard": shard_id}
            wire.send_frame(sock, request)
            prefix = bytearray(4)
            _recv_into(sock, memoryview(prefix), where)
            length = int.from_bytes(prefix, "big")
            if length > self._config.max_frame_bytes:
                msg = f"{where}: reply of {length} bytes exceeds the frame bound"
                raise ProtocolError(msg)
            body = bytearray(length)
            _recv_into(sock, memoryview(body), where)
        except (OSError, ProtocolError) as exc:
            self.close()
            msg = f"{where} failed: {exc}"
            raise NodeUnavailableError(msg) from exc
        except NodeUnavailableError:
            self.close()
            raise
        head_end = length - size - 5
        if head_end > 0 and body[head_end] == 0xC6:
            if int.from_bytes(body[head_end + 1 : head_end + 5], "big") == size:
                # the head with the blob's value replaced by nil decodes alone
                head = wire.decode_body(bytes(body[:head_end]) + b"\xc0")
                if head.get("ok") is True:
                    return memoryview(body)[head_end + 5 :]
        frame = wire.decode_body(body)
        if frame.get("ok") is True:
            self.close()
            msg = f"{where}: reply does not carry {size} bytes; the replica differs"
            raise ChecksumError(msg)
        _raise_error_frame(frame, where)
        raise AssertionError  # noqa: S101 - _raise_error_frame always raises


def _raise_error_frame(frame: Mapping[str, Any], where: str) -> None:
    code, error = frame.get("code"), frame.get("error")
    cls = wire.error_type(code, StorageError)
    msg = f"{where} failed ({code}): {error}"
    raise cls(msg)


class RelayStream:
    """R's side of a relay: one blocking connection answering a request with frames.

    Use as a context manager; iterate :meth:`frames`.

    Args:
        host: Address of the node R connects to (chain end or tree root).
        port: Its port.
        request: The relay request (``op`` and fields).
        config: Secret, frame bound and timeouts.
    """

    def __init__(
        self, host: str, port: int, request: dict[str, Any], *, config: NodeConfig
    ) -> None:
        self.address = f"{host}:{port}"
        self._host, self._port = host, port
        self._request = {"v": wire.PROTOCOL_VERSION, **request}
        self._config = config
        self._sock: socket.socket | None = None
        self._buffer = bytearray()

    def __enter__(self) -> RelayStream:
        self.connect()
        self.send_request()
        return self

    def connect(self) -> None:
        """Connect and authenticate (``with`` does it, then sends the request).

        Raises:
            NodeUnavailableError: the node cannot be reached.
            AuthenticationError: the node refused the secret.
        """
        try:
            self._sock = open_socket(self._host, self._port, self._config)
        except (OSError, ProtocolError) as exc:
            self.close()
            msg = f"relay to node {self.address} failed to start: {exc}"
            raise NodeUnavailableError(msg) from exc

    def send_request(self) -> None:
        """Send the relay request on the open connection.

        Raises:
            NodeUnavailableError: the connection broke.
        """
        try:
            if self._sock is None:
                msg = "not connected"
                raise ConnectionResetError(msg)
            wire.send_frame(self._sock, self._request)
        except OSError as exc:
            self.close()
            msg = f"relay request to node {self.address} failed: {exc}"
            raise NodeUnavailableError(msg) from exc

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def frames(self) -> Iterator[dict[str, Any]]:
        """Yield the reply's frames up to and including the ``end`` frame.

        Raises:
            NodeUnavailableError: the connection broke or timed out.
            StorageError: the node answered with an error frame.
        """
        where = f"relay from node {self.address}"
        while True:
            if self._sock is None:
                msg = f"{where}: connection closed"
                raise NodeUnavailableError(msg)
            try:
                frame = wire.recv_frame(
                    self._sock, self._config.max_frame_bytes, self._buffer
                )
            except (OSError, ProtocolError) as exc:
                self.close()
                msg = f"{where} broke: {exc}"
                raise NodeUnavailableError(msg) from exc
            if frame.get("ok") is not True:
                self.close()
                _raise_error_frame(frame, where)
            yield frame
            if frame.get("t") == "end":
                return


class Upstream:
    """A node's async connection to the next node up a relay structure.

    Open with :meth:`open`; read frames with :meth:`next`; always :meth:`close`.
    """

    def __init__(
        self,
        node: RelayNode,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        config: NodeConfig,
    ) -> None:
        self.node = node
        self._reader = reader
        self._writer = writer
        self._config = config
        self._where = f"relay from node {node.node_id} ({node.host}:{node.port})"

    @classmethod
    async def open(
        cls, node: RelayNode, request: Mapping[str, Any], config: NodeConfig
    ) -> Upstream:
        """Connect, authenticate and send ``request``.

        Raises:
            NodeUnavailableError: the node cannot be reached or refused us.
        """
        where = f"relay to node {node.node_id} ({node.host}:{node.port})"
        try:
            async with asyncio.timeout(config.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    node.host, node.port, limit=config.chunk_bytes
                )
        except (OSError, TimeoutError) as exc:
            msg = f"{where}: cannot connect: {exc}"
            raise NodeUnavailableError(msg) from exc
        upstream = cls(node, reader, writer, config)
        try:
            async with asyncio.timeout(config.io_timeout_s):
                hello = await wire.read_frame(reader, wire.HANDSHAKE_MAX_FRAME_BYTES)
                nonce = None if hello is None else hello.get("nonce")
                if not isinstance(nonce, bytes):
                    msg = f"{where}: no valid hello from the node"
                    raise NodeUnavailableError(msg)
                mac = wire.auth_mac(config.secret, nonce)
                auth = {"v": wire.PROTOCOL_VERSION, "op": "auth", "mac": mac}
                await wire.write_frame(writer, auth)
                reply = await wire.read_frame(reader, wire.HANDSHAKE_MAX_FRAME_BYTES)
                if reply is None or reply.get("ok") is not True:
                    msg = f"{where}: authentication refused; check sr3.node.secret"
                    raise NodeUnavailableError(msg)
                await wire.write_frame(writer, {"v": wire.PROTOCOL_VERSION, **request})
        except (OSError, TimeoutError, ProtocolError) as exc:
            await upstream.close()
            msg = f"{where}: handshake failed: {exc!r}"
            raise NodeUnavailableError(msg) from exc
        except NodeUnavailableError:
            await upstream.close()
            raise
        return upstream

    async def next(self) -> dict[str, Any]:
        """Return the next frame (the ``end`` frame last).

        Raises:
            NodeUnavailableError: the node died, stalled, or sent an error frame.
        """
        try:
            async with asyncio.timeout(self._config.io_timeout_s):
                frame = await wire.read_frame(
                    self._reader, self._config.max_frame_bytes
                )
        except (OSError, TimeoutError, ProtocolError) as exc:
            msg = f"{self._where} broke: {exc!r}"
            raise NodeUnavailableError(msg) from exc
        if frame is None:
            msg = f"{self._where}: the node closed the stream before its end"
            raise NodeUnavailableError(msg)
        if frame.get("ok") is not True:
            try:
                _raise_error_frame(frame, self._where)
            except SR3Error as exc:
                raise NodeUnavailableError(str(exc)) from exc
        return frame

    async def close(self) -> None:
        """Close the connection (no error if already closed)."""
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError):
            pass
