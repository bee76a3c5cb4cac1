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
hostile frame costs at most its own size. Reading and writing frames on streams
and sockets is :mod:`sr3.frame_io`'s.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping
from typing import Any

import msgpack

from sr3.errors import (
    AuthenticationError,
    ChecksumError,
    ProtocolError,
    ShardNotFoundError,
    SR3Error,
    StorageError,
)

__all__ = [
    "AUTH_CONTEXT",
    "BIN32_TAG",
    "Buffer",
    "ERROR_CODES",
    "HANDSHAKE_MAX_FRAME_BYTES",
    "LENGTH_PREFIX",
    "MAX_DEPTH",
    "NONCE_BYTES",
    "PROTOCOL_VERSION",
    "auth_mac",
    "check_depth",
    "check_mac",
    "decode_body",
    "error_reply",
    "error_type",
    "pack_frame",
    "pack_frame_head",
    "unpack_limits",
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

#: The 4-byte big-endian body length that leads every frame.
LENGTH_PREFIX = struct.Struct(">I")
_BIN32 = struct.Struct(">BI")
#: msgpack's bin32 type byte: a blob frame's last value starts with it.
BIN32_TAG = 0xC6
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
        return [LENGTH_PREFIX.pack(len(body)) + body]
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
    parts.append(_BIN32.pack(BIN32_TAG, blob_size))
    head = b"".join(parts)
    return LENGTH_PREFIX.pack(len(head) + blob_size) + head


def check_depth(obj: object) -> None:
    """Refuse a decoded frame nesting deeper than :data:`MAX_DEPTH` levels.

    Raises:
        ProtocolError: it nests deeper.
    """
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


def unpack_limits(size: int) -> dict[str, Any]:
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
        obj = msgpack.unpackb(body, **unpack_limits(size))
    except (ValueError, msgpack.UnpackException) as exc:
        msg = f"frame of {size} bytes is not valid msgpack: {exc}"
        raise ProtocolError(msg) from exc
    if not isinstance(obj, dict):
        msg = f"frame holds a {type(obj).__name__}; every frame must be a map"
        raise ProtocolError(msg)
    check_depth(obj)
    return obj
