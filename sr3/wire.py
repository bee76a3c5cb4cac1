"""Ring node wire protocol: length-prefixed msgpack frames, errors and HMAC auth.

A frame is a 4-byte big-endian body length followed by a msgpack map. Frames
carry ``"v": PROTOCOL_VERSION``; a connection opens with the server's ``hello``
(a random nonce) answered by the client's ``auth`` (an HMAC-SHA256 of the nonce
under the shared secret). Every failure reply has the shape
``{"ok": False, "code": <one of ERROR_CODES>, "error": <text>}``.

This module uses msgpack directly, as ``sr3.codec`` does: frames are transport
envelopes, not stored data, and big payloads need a zero-copy encoding
(:func:`pack_frame` with ``blob``) that the codec does not offer. Decoding is
bounded (lengths by the frame size, nesting by ``MAX_DEPTH``, no ext types), so a
hostile frame costs at most its own size.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import select
import socket
import struct
from collections.abc import Mapping
from typing import Any

import msgpack

from sr3.errors import (
    AuthenticationError,
    ChecksumError,
    NodeUnavailableError,
    ProtocolError,
    ShardNotFoundError,
    SR3Error,
    StorageError,
)

__all__ = [
    "AUTH_CONTEXT",
    "Buffer",
    "ERROR_CODES",
    "HANDSHAKE_MAX_FRAME_BYTES",
    "MAX_DEPTH",
    "NONCE_BYTES",
    "PROTOCOL_VERSION",
    "auth_mac",
    "check_mac",
    "decode_body",
    "error_reply",
    "error_type",
    "pack_frame",
    "pack_frame_head",
    "read_body",
    "read_frame",
    "read_length",
    "recv_exactly",
    "recv_frame",
    "send_frame",
    "write_frame",
    "write_parts",
]

PROTOCOL_VERSION = 1
AUTH_CONTEXT = b"sr3-auth-v1"
NONCE_BYTES = 32
# hello/auth frames are tiny; a peer that has not authenticated gets no more room.
HANDSHAKE_MAX_FRAME_BYTES = 4096
# Requests nest two or three levels; anything deeper is hostile or broken.
MAX_DEPTH = 16
ERROR_CODES = frozenset(
    {
        "bad_frame",
        "too_large",
        "auth",
        "unknown_op",
        "bad_request",
        "not_found",
        "corrupt",
        "internal",
    }
)

Buffer = bytes | bytearray | memoryview

_LENGTH = struct.Struct(">I")
# Frames this large are peeked at for a trailing payload received in place.
_SPLIT_MIN_BYTES = 64 * 1024
_PEEK_BYTES = 512
_BIN32 = struct.Struct(">BI")
_BIN32_TAG = 0xC6
_MAP16 = struct.Struct(">BH")
_MAP16_TAG = 0xDE


def auth_mac(secret: str, nonce: bytes) -> bytes:
    """Return the client's answer to a server nonce: HMAC-SHA256 under the secret."""
    return hmac.new(secret.encode(), AUTH_CONTEXT + nonce, hashlib.sha256).digest()


def check_mac(secret: str, nonce: bytes, mac: object) -> bool:
    """Return whether ``mac`` answers ``nonce`` (constant-time comparison)."""
    if not isinstance(mac, bytes):
        return False
    return hmac.compare_digest(auth_mac(secret, nonce), mac)


_ERROR_TYPES: dict[str, type[SR3Error]] = {
    "not_found": ShardNotFoundError,
    "corrupt": ChecksumError,
    "auth": AuthenticationError,
    "internal": StorageError,
}


def error_type(code: object, default: type[SR3Error]) -> type[SR3Error]:
    """Return the exception a client raises for an error reply's ``code``."""
    return _ERROR_TYPES.get(code if isinstance(code, str) else "", default)


def error_reply(code: str, error: str) -> dict[str, Any]:
    """Build a failure reply; ``code`` must be one of :data:`ERROR_CODES`."""
    if code not in ERROR_CODES:
        msg = f"unknown error code {code!r}; use one of {sorted(ERROR_CODES)}"
        raise ValueError(msg)
    return {"v": PROTOCOL_VERSION, "ok": False, "code": code, "error": error}


def pack_frame(
    msg: Mapping[str, Any], *, blob_key: str = "data", blob: Buffer | None = None
) -> list[Buffer]:
    """Encode one frame as buffers to write in order.

    ``blob``, when given, is added to the map under ``blob_key`` without being
    copied: the frame is written as a head part followed by the blob itself.

    Raises:
        ProtocolError: the message is not msgpack-able.
    """
    if blob is None:
        try:
            body = msgpack.packb(msg, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            msg_ = f"frame is not msgpack-able: {exc}"
            raise ProtocolError(msg_) from exc
        return [_LENGTH.pack(len(body)) + body]
    return [pack_frame_head(msg, blob_key, memoryview(blob).nbytes), blob]


def pack_frame_head(msg: Mapping[str, Any], blob_key: str, blob_size: int) -> bytes:
    """Encode a frame up to a ``blob_size``-byte blob under ``blob_key``.

    The blob's bytes must follow on the stream, written separately.

    Raises:
        ProtocolError: the message is not msgpack-able, already has ``blob_key``,
            has 65535 fields or more, or the blob is 4 GiB or more.
    """
    if len(msg) >= 0xFFFF or blob_key in msg or blob_size > 0xFFFFFFFF:
        msg_ = (
            f"cannot frame a {blob_size}-byte blob as {blob_key!r} beside "
            f"{len(msg)} fields {sorted(msg)[:8]}"
        )
        raise ProtocolError(msg_)
    packer = msgpack.Packer(use_bin_type=True)
    parts = [_MAP16.pack(_MAP16_TAG, len(msg) + 1)]
    try:
        for key, value in msg.items():
            parts.append(packer.pack(key))
            parts.append(packer.pack(value))
        parts.append(packer.pack(blob_key))
    except (TypeError, ValueError, OverflowError) as exc:
        msg_ = f"frame is not msgpack-able: {exc}"
        raise ProtocolError(msg_) from exc
    parts.append(_BIN32.pack(_BIN32_TAG, blob_size))
    head = b"".join(parts)
    return _LENGTH.pack(len(head) + blob_size) + head


def _check_depth(obj: object) -> None:
    stack: list[tuple[object, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            msg = f"frame nests deeper than {MAX_DEPTH} levels"
            raise ProtocolError(msg)
        stack.extend((child, depth + 1) for child in children)


def _refuse_ext(code: int, data: bytes) -> Any:
    msg = f"msgpack ext type {code} is not part of the protocol"
    raise ValueError(msg)


def _limits(size: int) -> dict[str, Any]:
    """Unpacker options bounding every length by the frame size."""
    return {
        "raw": False,
        "strict_map_key": True,
        "max_bin_len": size,
        "max_str_len": size,
        "max_array_len": size,
        "max_map_len": size,
        "max_ext_len": 0,
        "ext_hook": _refuse_ext,  # empty ext payloads pass max_ext_len
    }


def decode_body(body: Buffer) -> dict[str, Any]:
    """Decode a frame body into its map, bounding every length by the body size.

    Raises:
        ProtocolError: not msgpack, not a map, too deep, ext types, bad UTF-8,
            non-string keys or trailing bytes.
    """
    size = memoryview(body).nbytes
    try:
        obj = msgpack.unpackb(body, **_limits(size))
    except (ValueError, msgpack.UnpackException) as exc:
        msg = f"frame of {size} bytes is not valid msgpack: {exc}"
        raise ProtocolError(msg) from exc
    if not isinstance(obj, dict):
        msg = f"frame holds a {type(obj).__name__}; every frame must be a map"
        raise ProtocolError(msg)
    _check_depth(obj)
    return obj


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
        header = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        msg = f"stream ended after {len(exc.partial)} bytes of a frame length"
        raise ProtocolError(msg) from exc
    length: int = _LENGTH.unpack(header)[0]
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
    unpacker = msgpack.Unpacker(**_limits(length))
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
            if peek[pos : pos + 1] != bytes([_BIN32_TAG]) or len(peek) < pos + 5:
                return None
            size: int = _LENGTH.unpack_from(peek, pos + 1)[0]
            if pos + 5 + size != length:
                return None
            recv_exactly(sock, memoryview(bytearray(pos + 5)), "a frame head")
            head[key] = _recv_bytes(sock, size)
    except (ValueError, msgpack.UnpackException):
        return None  # not the expected shape: the full decode reports it
    _check_depth(head)
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
    header = bytearray(_LENGTH.size)
    recv_exactly(sock, memoryview(header), "a frame length")
    length: int = _LENGTH.unpack(header)[0]
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
