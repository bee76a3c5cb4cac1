"""msgpack encoding of metadata, keys, key groups and shards (the only msgpack user).

Every encoding is explicit: ``use_bin_type=True``, ``raw=False``, and map keys may
be any hashable msgpack value (``strict_map_key=False``) because state keys are
tuples of field values.
"""

from __future__ import annotations

from typing import Any

import msgpack

from sr3.errors import CodecError

__all__ = ["META_VERSION", "pack_meta", "unpack_meta"]

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
