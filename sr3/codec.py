"""msgpack encoding of metadata, keys, values and key-group blobs (only msgpack user).

Every encoding is explicit: ``use_bin_type=True``, ``raw=False``, and map keys may
be any hashable msgpack value (``strict_map_key=False``) because state values may be
maps with int keys. Keys and values may hold ints of any size, as Python's and
Storm's JSON do: those outside msgpack's 64 bits travel as extension type 1 (big
endian two's complement), so a counter past 2**64 still checkpoints. The shard
container (``encode_shard``, ``decode_shard``, ``pack_shards``) lives in
:mod:`sr3.shard` and is re-exported here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgpack

from sr3.errors import CodecError
from sr3.shard import (
    SHARD_VERSION,
    DecodedShard,
    blob_spans,
    decode_shard,
    encode_shard,
    pack_shards,
)

__all__ = [
    "BLOB_VERSION",
    "META_VERSION",
    "SHARD_VERSION",
    "BlobKind",
    "DecodedShard",
    "KeyGroupBlob",
    "apply_delta",
    "blob_kind",
    "blob_spans",
    "decode_key",
    "decode_key_group",
    "decode_key_group_raw",
    "decode_shard",
    "decode_value",
    "encode_key",
    "encode_key_group",
    "encode_key_group_delta",
    "encode_key_group_delta_raw",
    "encode_key_group_raw",
    "encode_shard",
    "encode_value",
    "merge_key_group_blobs",
    "pack_meta",
    "pack_shards",
    "unpack_meta",
]

META_VERSION = 1
_MAX_META_BYTES = 1024 * 1024  # ZooKeeper's znode limit


def pack_meta(obj: Any) -> bytes:
    """Encode coordination metadata (manifests, shard records) for a znode.

    Raises:
        CodecError: the object is not msgpack-able or exceeds 1 MiB.
    """
    try:
        body = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        msg = f"metadata is not msgpack-able: {exc}"
        raise CodecError(msg) from exc
    data = bytes([META_VERSION]) + body
    if len(data) > _MAX_META_BYTES:
        msg = (
            f"metadata of {len(data)} bytes exceeds ZooKeeper's 1 MiB znode limit; "
            "raise sr3.ring.max.shard.bytes so the manifest lists fewer shards"
        )
        raise CodecError(msg)
    return data


def unpack_meta(data: bytes) -> Any:
    """Decode :func:`pack_meta` output.

    Raises:
        CodecError: unknown version or malformed bytes.
    """
    if not data or data[0] != META_VERSION:
        version = data[0] if data else None
        msg = f"metadata format version {version!r}; this build reads {META_VERSION}"
        raise CodecError(msg)
    try:
        return msgpack.unpackb(data[1:], raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        msg = f"malformed metadata: {exc}"
        raise CodecError(msg) from exc


# --- keys and values -------------------------------------------------------------

_ENCODE_ERRORS = (TypeError, ValueError, OverflowError)
_DECODE_ERRORS = (TypeError, ValueError, msgpack.UnpackException)
_packers = threading.local()
_BIG_INT_EXT = 1


def _pack_default(obj: Any) -> msgpack.ExtType:
    """Encode what msgpack lacks: ints beyond 64 bits (msgpack asks on overflow)."""
    if isinstance(obj, int):
        size = (obj.bit_length() + 8) // 8  # room for the sign bit
        return msgpack.ExtType(_BIG_INT_EXT, obj.to_bytes(size, "big", signed=True))
    msg = f"can not serialize {type(obj).__name__!r} object"
    raise TypeError(msg)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _BIG_INT_EXT:
        return int.from_bytes(data, "big", signed=True)
    return msgpack.ExtType(code, data)


def _unpack(data: bytes | memoryview, *, use_list: bool = True) -> Any:
    return msgpack.unpackb(
        data,
        raw=False,
        use_list=use_list,
        strict_map_key=False,
        ext_hook=_ext_hook,
    )


def _pack(obj: Any) -> bytes:
    """``msgpack.packb(obj, use_bin_type=True)`` with this thread's packer.

    Keys and values are encoded per tuple on the hot path; a reused packer costs
    0.16 us a call against 0.4 us for ``packb``, which builds one each time. A
    packer that failed is dropped, so no partial output can leak into the next.
    """
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(
            use_bin_type=True, default=_pack_default
        )
    try:
        data: bytes = packer.pack(obj)
    except BaseException:
        del _packers.packer
        raise
    return data


def encode_key(key: tuple[Any, ...]) -> bytes:
    """Encode a state key canonically: the msgpack array of its fields.

    Equal tuples of equal-typed fields always give equal bytes (msgpack has one
    encoding per value here: floats are always 64-bit). Fields of different types
    that Python compares equal (``1``, ``1.0``, ``True``) encode differently and are
    distinct keys, as in Storm's fields grouping.

    Raises:
        CodecError: ``key`` holds a value msgpack cannot encode.
    """
    try:
        return _pack(key)
    except _ENCODE_ERRORS as exc:
        msg = (
            f"state key {key!r} cannot be encoded ({exc}); use str, int or bytes fields"
        )
        raise CodecError(msg) from exc


def decode_key(data: bytes | memoryview) -> tuple[Any, ...]:
    """Decode :func:`encode_key` output; nested arrays come back as tuples.

    Raises:
        CodecError: the bytes are not an encoded key.
    """
    try:
        key = _unpack(data, use_list=False)
    except _DECODE_ERRORS as exc:
        msg = f"malformed encoded key {bytes(data)[:64]!r}: {exc}"
        raise CodecError(msg) from exc
    if not isinstance(key, tuple):
        msg = f"encoded key decodes to a {type(key).__name__}, not a tuple"
        raise CodecError(msg)
    return key


def encode_value(value: Any) -> bytes:
    """Encode one state value (plain msgpack: tuples come back as lists).

    Raises:
        CodecError: the value holds something msgpack cannot encode.
    """
    try:
        return _pack(value)
    except _ENCODE_ERRORS as exc:
        msg = f"a {type(value).__name__} value cannot be encoded: {exc}"
        raise CodecError(msg) from exc


def decode_value(data: bytes | memoryview) -> Any:
    """Decode :func:`encode_value` output.

    Raises:
        CodecError: malformed bytes.
    """
    try:
        return _unpack(data)
    except _DECODE_ERRORS as exc:
        msg = f"malformed encoded value: {exc}"
        raise CodecError(msg) from exc


# --- key-group blobs -------------------------------------------------------------
# A blob is [BLOB_VERSION][kind tag][msgpack body]. Entries are keyed by their
# encoded key (bin), so decoding a blob never decodes keys, nested lists in values
# stay lists, and merging blobs is pure dict work. FULL body: {key: value}.
# DELTA body: [{key: value} upserts, [key, ...] deletes].

BLOB_VERSION = 1
_FULL_TAG, _DELTA_TAG = 0x46, 0x44  # "F", "D"


class BlobKind(StrEnum):
    """What a key-group blob holds; the values match ``ShardMeta.kind``."""

    FULL = "full"
    DELTA = "delta"


K = TypeVar("K", tuple[Any, ...], bytes)


@dataclass(frozen=True, slots=True)
class KeyGroupBlob(Generic[K]):
    """A decoded key-group blob.

    Attributes:
        kind: FULL replaces the key group; DELTA upserts ``entries`` and removes
            ``deletes``.
        entries: Key to value (all entries for FULL, upserts for DELTA).
        deletes: Keys removed (always empty for FULL).
    """

    kind: BlobKind
    entries: dict[K, Any]
    deletes: list[K]


def _pack_blob(tag: int, body: Any) -> bytes:
    try:
        packed = msgpack.packb(body, use_bin_type=True, default=_pack_default)
    except _ENCODE_ERRORS as exc:
        msg = f"key-group entries cannot be encoded: {exc}"
        raise CodecError(msg) from exc
    return bytes((BLOB_VERSION, tag)) + packed


def encode_key_group_raw(entries: Mapping[bytes, Any]) -> bytes:
    """Encode a FULL blob from entries keyed by encoded keys.

    Raises:
        CodecError: a value cannot be encoded.
    """
    return _pack_blob(
        _FULL_TAG, entries if isinstance(entries, dict) else dict(entries)
    )


def encode_key_group_delta_raw(
    upserts: Mapping[bytes, Any], deletes: Iterable[bytes]
) -> bytes:
    """Encode a DELTA blob from encoded keys.

    Raises:
        CodecError: a value cannot be encoded.
    """
    return _pack_blob(_DELTA_TAG, [dict(upserts), list(deletes)])


def encode_key_group(entries: Mapping[tuple[Any, ...], Any]) -> bytes:
    """Encode a FULL key-group blob: every entry of the key group.

    Raises:
        CodecError: a key or value cannot be encoded.
    """
    return encode_key_group_raw({encode_key(k): v for k, v in entries.items()})


def encode_key_group_delta(
    upserts: Mapping[tuple[Any, ...], Any], deletes: Iterable[tuple[Any, ...]]
) -> bytes:
    """Encode a DELTA key-group blob: changed entries and deleted keys.

    Raises:
        CodecError: a key or value cannot be encoded.
    """
    return encode_key_group_delta_raw(
        {encode_key(k): v for k, v in upserts.items()}, [encode_key(k) for k in deletes]
    )


def blob_kind(blob: bytes | memoryview) -> BlobKind:
    """Return a blob's kind from its header without decoding the body.

    Raises:
        CodecError: unknown version or kind tag.
    """
    if len(blob) < 3 or blob[0] != BLOB_VERSION:
        version = blob[0] if len(blob) else None
        msg = (
            f"key-group blob format version {version!r} (length {len(blob)}); this "
            f"build reads version {BLOB_VERSION}: upgrade sr3 or rewrite the snapshot"
        )
        raise CodecError(msg)
    if blob[1] == _FULL_TAG:
        return BlobKind.FULL
    if blob[1] == _DELTA_TAG:
        return BlobKind.DELTA
    msg = f"key-group blob has unknown kind tag {blob[1]:#04x}"
    raise CodecError(msg)


def decode_key_group_raw(blob: bytes | memoryview) -> KeyGroupBlob[bytes]:
    """Decode a blob, leaving keys encoded (the fast path used by state and merges).

    Raises:
        CodecError: unknown version or kind, or malformed body.
    """
    kind = blob_kind(blob)
    try:
        body = _unpack(memoryview(blob)[2:])
    except _DECODE_ERRORS as exc:
        msg = f"malformed {kind} key-group blob: {exc}"
        raise CodecError(msg) from exc
    if kind is BlobKind.FULL and isinstance(body, dict):
        return KeyGroupBlob(kind, body, [])
    if (
        kind is BlobKind.DELTA
        and isinstance(body, list)
        and len(body) == 2
        and isinstance(body[0], dict)
        and isinstance(body[1], list)
    ):
        return KeyGroupBlob(kind, body[0], body[1])
    msg = f"malformed {kind} key-group blob: unexpected {type(body).__name__} body"
    raise CodecError(msg)


def decode_key_group(blob: bytes | memoryview) -> KeyGroupBlob[tuple[Any, ...]]:
    """Decode a blob with keys decoded to tuples.

    Raises:
        CodecError: unknown version or kind, or malformed body.
    """
    raw = decode_key_group_raw(blob)
    entries = {decode_key(k): v for k, v in raw.entries.items()}
    return KeyGroupBlob(raw.kind, entries, [decode_key(k) for k in raw.deletes])


def apply_delta(base_entries: Mapping[K, Any], delta: KeyGroupBlob[K]) -> dict[K, Any]:
    """Return a new dict: ``base_entries`` with ``delta`` applied (FULL replaces)."""
    if delta.kind is BlobKind.FULL:
        return dict(delta.entries)
    out = dict(base_entries)
    for key in delta.deletes:
        out.pop(key, None)
    out.update(delta.entries)
    return out


def merge_key_group_blobs(blobs: Sequence[bytes | memoryview]) -> bytes:
    """Fold blobs of one key group, oldest first, into one equivalent blob.

    The result is FULL when the sequence holds a FULL blob (everything before the
    last FULL is superseded); otherwise it is one DELTA equivalent to applying them
    in order, so tree recovery can merge deltas on a holder without the base.

    Raises:
        CodecError: no blobs, or a blob is malformed.
    """
    if not blobs:
        msg = "merge_key_group_blobs needs at least one blob"
        raise CodecError(msg)
    kinds = [blob_kind(b) for b in blobs]
    start = max((i for i, k in enumerate(kinds) if k is BlobKind.FULL), default=0)
    if start == len(blobs) - 1:
        return bytes(blobs[start])
    entries: dict[bytes, Any] = {}
    deleted: dict[bytes, None] = {}  # ordered set
    for blob in blobs[start:]:
        part = decode_key_group_raw(blob)
        if part.kind is BlobKind.FULL:
            entries = part.entries
            continue
        for key in part.deletes:
            entries.pop(key, None)
            deleted[key] = None
        for key in part.entries:
            deleted.pop(key, None)
        entries.update(part.entries)
    if kinds[start] is BlobKind.FULL:
        return encode_key_group_raw(entries)
    return encode_key_group_delta_raw(entries, deleted)
