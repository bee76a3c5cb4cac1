"""Relay streams, R's side: the star shard link and the blocking relay reader.

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

Blobs travel last in their frame, as a bin32 under ``data``
(:func:`sr3.wire.pack_frame_head`), so a reader decodes only a frame's head: R
receives a blob straight into its destination (:meth:`RelayStream.next_head`),
and a relaying node forwards a frame's bytes exactly as they arrived
(:meth:`sr3.recovery.upstream.Upstream.next_raw`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from sr3 import frame_io, wire
from sr3.buffers import fresh_buffer
from sr3.checksum import crc32
from sr3.client_connection import authenticate
from sr3.config import NodeConfig
from sr3.errors import (
    ChecksumError,
    NodeUnavailableError,
    ProtocolError,
    StorageError,
)

__all__ = [
    "RelayStream",
    "ShardLink",
    "open_socket",
    "raise_error_frame",
    "split_head",
]

logger = logging.getLogger(__name__)

# A frame's blob under "data" as pack_frame_head writes it: the key as a fixstr,
# then a bin32 tag; its 4-byte size follows.
BLOB_MARK = b"\xa4data\xc6"
_NIL = b"\xc0"
# Heads of relay frames are a few dozen bytes; 512 leaves room for long shard ids.
HEAD_BYTES = 512


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


def _recv_checked(sock: socket.socket, view: memoryview, where: str, start: int) -> int:
    """Fill ``view``; return the crc32 of ``view[start:]``, computed as it arrives.

    Each piece is checksummed right after the kernel copied it in, while it is
    still in the CPU cache, rather than in a second pass over the whole buffer.
    """
    got = crc = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            msg = f"{where}: connection closed after {got} of {len(view)} bytes"
            raise NodeUnavailableError(msg)
        if got + n > start:
            crc = crc32(view[max(got, start) : got + n], crc)
        got += n
    return crc


def split_head(head: wire.Buffer, length: int) -> tuple[dict[str, Any], int] | None:
    """Decode the fields of a frame whose blob comes last, without the blob.

    ``head`` holds the first bytes of a frame body of ``length`` bytes. When the
    body ends in a bin32 under ``data`` running to its end (what
    :func:`sr3.wire.pack_frame_head` writes), returns the frame's fields with
    ``data`` left out and the offset of the blob's first byte in the body;
    otherwise None (decode the whole body instead).
    """
    data = bytes(head)
    at = data.find(BLOB_MARK)
    while at >= 0:
        start = at + len(BLOB_MARK) + 4
        if start <= len(data):
            size = int.from_bytes(data[start - 4 : start], "big")
            if start + size == length:
                try:
                    # the head with the blob's value replaced by nil decodes alone
                    fields = wire.decode_body(data[: at + 5] + _NIL)
                except ProtocolError:
                    fields = None
                if fields is not None and "data" in fields and fields["data"] is None:
                    del fields["data"]
                    return fields, start
        at = data.find(BLOB_MARK, at + 1)
    return None


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

    def get(self, shard_id: str, size: int, crc: int | None = None) -> memoryview:
        """Return the node's replica of a shard of ``size`` bytes.

        With ``crc`` (the manifest's crc32) the payload is checked against it as
        it arrives; without it, checking is the caller's.

        Raises:
            NodeUnavailableError: the node cannot be reached or broke the reply.
            ShardNotFoundError: the node holds no replica.
            ChecksumError: the node found its replica corrupt, or the bytes
                received fail ``crc``.
            StorageError: any other error reply.
        """
        where = f"node {self.address}: get of shard {shard_id!r}"
        try:
            if self._sock is None:
                self._sock = open_socket(self._host, self._port, self._config)
            sock = self._sock
            request = {"v": wire.PROTOCOL_VERSION, "op": "get", "shard": shard_id}
            frame_io.send_frame(sock, request)
            prefix = bytearray(4)
            frame_io.recv_exactly(sock, memoryview(prefix), where)
            length = int.from_bytes(prefix, "big")
            if length > self._config.max_frame_bytes:
                msg = f"{where}: reply of {length} bytes exceeds the frame bound"
                raise ProtocolError(msg)
            body = fresh_buffer(length)  # R keeps it: the shard is a view of it
            running = _recv_checked(sock, body, where, length - size)
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
                    if crc is not None and running != crc:
                        # every byte was read: the connection stays in step
                        msg = (
                            f"{where}: received bytes fail the manifest's crc32 "
                            f"{crc:#010x}; read another replica"
                        )
                        raise ChecksumError(msg)
                    return body[head_end + 5 :]
        frame = wire.decode_body(body)
        if frame.get("ok") is True:
            self.close()
            msg = f"{where}: reply does not carry {size} bytes; the replica differs"
            raise ChecksumError(msg)
        raise_error_frame(frame, where)
        raise AssertionError  # noqa: S101 - _raise_error_frame always raises


def raise_error_frame(frame: Mapping[str, Any], where: str) -> None:
    """Raise the project error an error frame (``ok`` False) stands for.

    Raises:
        StorageError: or the subclass the frame's ``code`` names.
    """
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
        self._spill = b""  # blob bytes received with the head
        self._blob_left = 0  # blob bytes of the current frame not received yet

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
            frame_io.send_frame(self._sock, self._request)
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
                frame = frame_io.recv_frame(
                    self._sock, self._config.max_frame_bytes, self._buffer
                )
            except (OSError, ProtocolError) as exc:
                self.close()
                msg = f"{where} broke: {exc}"
                raise NodeUnavailableError(msg) from exc
            if frame.get("ok") is not True:
                self.close()
                raise_error_frame(frame, where)
            yield frame
            if frame.get("t") == "end":
                return

    def next_head(self) -> tuple[dict[str, Any], int]:
        """Receive the next frame up to its blob; return its fields and blob size.

        The caller then receives the blob with :meth:`recv_blob_into` or drops it
        with :meth:`skip_blob` (the next call drops whatever is left). A frame
        without a trailing blob comes back whole, with a blob size of 0.

        Raises:
            NodeUnavailableError: the connection broke or timed out.
            StorageError: the node answered with an error frame.
        """
        where = f"relay from node {self.address}"
        if self._blob_left:
            self.skip_blob()
        if self._sock is None:
            msg = f"{where}: connection closed"
            raise NodeUnavailableError(msg)
        try:
            fields, size = self._recv_head(self._sock, where)
        except (OSError, ProtocolError) as exc:
            self.close()
            msg = f"{where} broke: {exc}"
            raise NodeUnavailableError(msg) from exc
        except NodeUnavailableError:
            self.close()
            raise
        if fields.get("ok") is not True:
            self.close()
            raise_error_frame(fields, where)
        return fields, size

    def _recv_head(self, sock: socket.socket, where: str) -> tuple[dict[str, Any], int]:
        prefix = bytearray(4)
        frame_io.recv_exactly(sock, memoryview(prefix), where)
        length = int.from_bytes(prefix, "big")
        if length > self._config.max_frame_bytes:
            msg = f"{where}: frame of {length} bytes exceeds the frame bound"
            raise ProtocolError(msg)
        first = bytearray(min(length, HEAD_BYTES))
        frame_io.recv_exactly(sock, memoryview(first), where)
        split = split_head(first, length) if length > len(BLOB_MARK) else None
        if split is not None:
            fields, start = split
            self._spill = bytes(first[start:])
            self._blob_left = length - start
            return fields, self._blob_left
        body = bytearray(length)
        body[: len(first)] = first
        frame_io.recv_exactly(sock, memoryview(body)[len(first) :], where)
        return wire.decode_body(body), 0

    def recv_blob_into(self, view: memoryview) -> None:
        """Receive the current frame's blob into ``view`` (exactly its size).

        Raises:
            NodeUnavailableError: the connection broke or timed out.
            ValueError: ``view`` is not the blob's size.
        """
        where = f"relay from node {self.address}"
        if view.nbytes != self._blob_left:
            msg = f"blob of {self._blob_left} bytes does not fit {view.nbytes}"
            raise ValueError(msg)
        if self._sock is None:
            msg = f"{where}: connection closed"
            raise NodeUnavailableError(msg)
        spill, self._spill = self._spill, b""
        view[: len(spill)] = spill
        try:
            frame_io.recv_exactly(self._sock, view[len(spill) :], where)
        except OSError as exc:
            self.close()
            msg = f"{where} broke: {exc}"
            raise NodeUnavailableError(msg) from exc
        except NodeUnavailableError:
            self.close()
            raise
        self._blob_left = 0

    def skip_blob(self) -> None:
        """Receive and drop the rest of the current frame's blob.

        Raises:
            NodeUnavailableError: the connection broke or timed out.
        """
        left, self._blob_left = self._blob_left - len(self._spill), 0
        self._spill = b""
        if left <= 0:
            return
        if len(self._buffer) < min(left, 1 << 20):
            self._buffer = bytearray(min(left, 1 << 20))
        with memoryview(self._buffer) as scratch:
            while left:
                n = min(left, len(scratch))
                self._blob_left = n  # recv_blob_into's size check
                self.recv_blob_into(scratch[:n])
                left -= n
