"""Wire frames read and written on asyncio streams and blocking sockets.

The frame format, its bounds and its decoding are :mod:`sr3.wire`'s. The node
server reads frames from asyncio streams (:func:`read_frame`, or
:func:`read_length` and :func:`read_body` to check a frame's size before reading
it); blocking clients and recovery transfers send and receive them on sockets
(:func:`send_frame`, :func:`recv_frame`), and a server connection writes big
replies from a worker thread (:func:`write_parts`). A large frame ending in a
payload is received with the payload read in place, peeking at the frame's head
(so this module reads msgpack too).
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
from collections.abc import Mapping
from typing import Any

import msgpack

from sr3.errors import NodeUnavailableError, ProtocolError
from sr3.wire import (
    BIN32_TAG,
    LENGTH_PREFIX,
    Buffer,
    check_depth,
    decode_body,
    pack_frame,
    unpack_limits,
)

__all__ = [
    "read_body",
    "read_frame",
    "read_length",
    "recv_exactly",
    "recv_frame",
    "send_frame",
    "write_frame",
    "write_parts",
]

# Frames this large are peeked at for a trailing payload received in place.
_SPLIT_MIN_BYTES = 64 * 1024
_PEEK_BYTES = 512


def _check_length(length: int, max_frame_bytes: int) -> None:
    if length > max_frame_bytes:
        msg = (
            f"frame of {length} bytes exceeds the {max_frame_bytes}-byte bound; "
            "raise sr3.node.max.frame.bytes on both ends or send smaller shards"
        )
        raise ProtocolError(msg)


async def read_length(reader: asyncio.StreamReader) -> int | None:
    """Read a frame's length prefix; None on a clean end of stream.

    Raises:
        ProtocolError: the stream ended inside the prefix.
    """
    try:
        header = await reader.readexactly(LENGTH_PREFIX.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        msg = f"stream ended after {len(exc.partial)} bytes of a frame length"
        raise ProtocolError(msg) from exc
    length: int = LENGTH_PREFIX.unpack(header)[0]
    return length


async def read_body(reader: asyncio.StreamReader, length: int) -> bytes:
    """Read a frame body of ``length`` bytes (already checked against the bound).

    Raises:
        ProtocolError: the stream ended inside the body.
    """
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        msg = f"stream ended after {len(exc.partial)} of {length} frame bytes"
        raise ProtocolError(msg) from exc


async def read_frame(
    reader: asyncio.StreamReader, max_frame_bytes: int
) -> dict[str, Any] | None:
    """Read and decode one frame; None on a clean end of stream.

    Raises:
        ProtocolError: oversize, truncated or malformed frame.
    """
    length = await read_length(reader)
    if length is None:
        return None
    _check_length(length, max_frame_bytes)
    return decode_body(await read_body(reader, length))


async def write_frame(
    writer: asyncio.StreamWriter,
    msg: Mapping[str, Any],
    *,
    blob_key: str = "data",
    blob: Buffer | None = None,
) -> None:
    """Write one frame and wait until the transport drained it."""
    for part in pack_frame(msg, blob_key=blob_key, blob=blob):
        writer.write(part)
    await writer.drain()


def send_frame(
    sock: socket.socket,
    msg: Mapping[str, Any],
    *,
    blob_key: str = "data",
    blob: Buffer | None = None,
) -> None:
    """Send one frame on a blocking socket (socket errors propagate)."""
    parts = pack_frame(msg, blob_key=blob_key, blob=blob)
    for part in parts:
        sock.sendall(part)


def write_parts(fd: int, parts: list[Buffer], timeout_s: float) -> None:
    """Write buffers in order on a non-blocking socket fd, from a worker thread.

    Used where an asyncio transport would copy what the socket does not take
    at once; the caller makes sure nothing else writes meanwhile.

    Raises:
        TimeoutError: the peer accepted no bytes for ``timeout_s``.
        OSError: the connection failed.
    """
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    views = [memoryview(part).cast("B") for part in parts]
    while views:
        try:
            sent = os.writev(fd, views)
        except BlockingIOError:
            if not poller.poll(timeout_s * 1000):
                msg = f"peer accepted no bytes for {timeout_s}s"
                raise TimeoutError(msg) from None
            continue
        while views and sent >= views[0].nbytes:
            sent -= views.pop(0).nbytes
        if views:
            views[0] = views[0][sent:]


def recv_exactly(sock: socket.socket, view: memoryview, what: str) -> None:
    """Fill ``view`` from a blocking socket.

    Raises:
        NodeUnavailableError: the peer closed the connection first.
    """
    got = 0
    while got < len(view):
        # MSG_WAITALL: on a blocking socket one call (one GIL release) per frame.
        n = sock.recv_into(view[got:], 0, socket.MSG_WAITALL)
        if n == 0:
            msg = f"connection closed after {got} of {len(view)} bytes of {what}"
            raise NodeUnavailableError(msg)
        got += n


def _recv_bytes(sock: socket.socket, size: int) -> bytes:
    """Receive ``size`` bytes into a new bytes object (no copy on a blocking socket)."""
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(remaining, socket.MSG_WAITALL)
        if not chunk:
            msg = f"connection closed {remaining} bytes before the end of a frame"
            raise NodeUnavailableError(msg)
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _recv_blob_frame(sock: socket.socket, length: int) -> dict[str, Any] | None:
    """Receive a frame ending in a large bin value with the bin read in place.

    Peeks at the head of the body: unless its last value is a bin32 running to
    the end of the frame (what :func:`pack_frame` with a blob produces), returns
    None having consumed nothing, and the caller decodes the frame as usual.
    """
    peek = sock.recv(min(length, _PEEK_BYTES), socket.MSG_PEEK | socket.MSG_WAITALL)
    unpacker = msgpack.Unpacker(**unpack_limits(length))
    unpacker.feed(peek)
    head: dict[str, Any] = {}
    try:
        count = unpacker.read_map_header()
        for index in range(count):
            key = unpacker.unpack()
            if not isinstance(key, str):
                return None
            pos = unpacker.tell()
            if index < count - 1:
                head[key] = unpacker.unpack()
                continue
            if peek[pos : pos + 1] != bytes([BIN32_TAG]) or len(peek) < pos + 5:
                return None
            size: int = LENGTH_PREFIX.unpack_from(peek, pos + 1)[0]
            if pos + 5 + size != length:
                return None
            recv_exactly(sock, memoryview(bytearray(pos + 5)), "a frame head")
            head[key] = _recv_bytes(sock, size)
    except (ValueError, msgpack.UnpackException):
        return None  # not the expected shape: the full decode reports it
    check_depth(head)
    return head


def recv_frame(
    sock: socket.socket, max_frame_bytes: int, buffer: bytearray | None = None
) -> dict[str, Any]:
    """Receive and decode one frame from a blocking socket.

    A large frame ending in a bin value (a payload) is received with the bin
    read straight into its bytes object. Otherwise ``buffer``, when given,
    receives the body and is grown in place as needed, so a caller can keep it
    across frames. Decoded values never alias it.

    Raises:
        NodeUnavailableError: the peer closed the connection.
        ProtocolError: oversize or malformed frame.
    """
    header = bytearray(LENGTH_PREFIX.size)
    recv_exactly(sock, memoryview(header), "a frame length")
    length: int = LENGTH_PREFIX.unpack(header)[0]
    _check_length(length, max_frame_bytes)
    if length >= _SPLIT_MIN_BYTES:
        frame = _recv_blob_frame(sock, length)
        if frame is not None:
            return frame
    if buffer is None:
        buffer = bytearray(length)
    elif len(buffer) < length:
        buffer.extend(bytes(length - len(buffer)))
    with memoryview(buffer) as whole, whole[:length] as view:
        recv_exactly(sock, view, "a frame")
        return decode_body(view)
