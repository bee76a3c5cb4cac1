"""The shard container: a versioned, checksummed run of encoded key-group blobs.

A shard is the unit of placement and transfer. Decoding one verifies its version and
crc32 and indexes its blobs as zero-copy views, without decoding any blob, so lazy
install costs one checksum pass. The layout (integers little-endian)::

    prelude  version u8 | crc32 of body u32 | body length u64
    body     owner length u16 | epoch u64 | kind u8 | key groups n u32
             owner (UTF-8) | n x key group u32 | n x blob length u64 | blobs

Blobs appear in ascending key-group order. Import these names from
:mod:`sr3.codec`, which re-exports them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from sr3.checksum import crc32
from sr3.errors import ChecksumError, CodecError

__all__ = [
    "SHARD_VERSION",
    "DecodedShard",
    "blob_spans",
    "decode_shard",
    "encode_shard",
    "pack_shards",
]

SHARD_VERSION = 1
_PRELUDE = struct.Struct("<BIQ")
_HEAD = struct.Struct("<HQBI")
_KINDS = ("full", "delta")  # index = the kind byte; values match ShardMeta.kind
_MAX_OWNER_BYTES = 0xFFFF
_MAX_KEY_GROUP = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class DecodedShard:
    """A verified shard whose key-group blobs are still encoded.

    Attributes:
        owner: Owner that wrote it.
        epoch: Epoch that wrote it.
        kind: ``"full"`` or ``"delta"`` (``codec.BlobKind`` values).
        key_groups: Key group to its encoded blob, as zero-copy views of the input.
    """

    owner: str
    epoch: int
    kind: str
    key_groups: dict[int, memoryview]


def encode_shard(
    owner: str,
    epoch: int,
    kind: str,
    key_groups: Mapping[int, bytes | memoryview],
) -> bytes:
    """Encode key-group blobs, in ascending key-group order, into one shard.

    Raises:
        CodecError: ``kind`` is not full/delta, ``epoch`` is negative, the owner
            name exceeds 64 KiB, or a key group is out of range.
    """
    owner_bytes = owner.encode()
    order = sorted(key_groups)
    if (
        kind not in _KINDS
        or epoch < 0
        or len(owner_bytes) > _MAX_OWNER_BYTES
        or (order and not 0 <= order[0] <= order[-1] <= _MAX_KEY_GROUP)
    ):
        msg = (
            f"cannot encode a shard of owner {owner[:80]!r} epoch {epoch} kind "
            f"{kind!r}: use kind full or delta, an epoch >= 0, an owner name under "
            "64 KiB and key groups in 0..2**32-1"
        )
        raise CodecError(msg)
    blobs = [key_groups[kg] for kg in order]
    lengths = [len(blob) for blob in blobs]
    count = len(order)
    head = b"".join(
        [
            _HEAD.pack(len(owner_bytes), epoch, _KINDS.index(kind), count),
            owner_bytes,
            struct.pack(f"<{count}I", *order),
            struct.pack(f"<{count}Q", *lengths),
        ]
    )
    crc = zlib.crc32(head)
    for blob in blobs:
        crc = zlib.crc32(blob, crc)
    prelude = _PRELUDE.pack(SHARD_VERSION, crc, len(head) + sum(lengths))
    return b"".join([prelude, head, *blobs])


def decode_shard(
    data: bytes | memoryview, *, shard_id: str = "shard", verified: bool = False
) -> DecodedShard:
    """Verify a shard's version and checksum; index its blobs without decoding them.

    Args:
        data: The encoded shard; the returned views keep it alive.
        shard_id: Name used in error messages.
        verified: The caller already checked the whole payload against the
            manifest's crc32 (which covers these bytes), so the body crc32 is
            not computed a second time; version and length are still checked.

    Raises:
        CodecError: a format version this build cannot read, or a malformed header.
        ChecksumError: the bytes are truncated or fail their crc32 (fetch another
            replica).
    """
    view = memoryview(data).cast("B")
    if len(view) < _PRELUDE.size or view[0] != SHARD_VERSION:
        version = view[0] if len(view) else None
        msg = (
            f"{shard_id}: shard format version {version!r} ({len(view)} bytes); this "
            f"build reads version {SHARD_VERSION}: upgrade sr3 on this process, or "
            "rewrite the snapshot with a build that matches"
        )
        raise CodecError(msg)
    _, stored_crc, body_len = _PRELUDE.unpack_from(view)
    body = view[_PRELUDE.size :]
    if len(body) != body_len:
        msg = (
            f"{shard_id}: {len(body)} body bytes where the prelude says {body_len}; "
            "the copy is truncated or padded, fetch another replica"
        )
        raise ChecksumError(msg)
    crc = stored_crc if verified else zlib.crc32(body)
    if crc != stored_crc:
        msg = (
            f"{shard_id}: crc32 {crc:#010x} differs from the stored "
            f"{stored_crc:#010x}; the copy is corrupt, fetch another replica"
        )
        raise ChecksumError(msg)
    return _index(body, shard_id)


def _index(body: memoryview, shard_id: str) -> DecodedShard:
    try:
        owner_len, epoch, kind_byte, count = _HEAD.unpack_from(body)
        pos = _HEAD.size
        owner = str(body[pos : pos + owner_len], "utf-8")
        pos += owner_len
        order = struct.unpack_from(f"<{count}I", body, pos)
        pos += 4 * count
        lengths = struct.unpack_from(f"<{count}Q", body, pos)
        pos += 8 * count
        kind = _KINDS[kind_byte]
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        msg = f"{shard_id}: malformed shard header: {exc}"
        raise CodecError(msg) from exc
    if pos + sum(lengths) != len(body):
        msg = (
            f"{shard_id}: blob lengths end at byte {pos + sum(lengths)} of a "
            f"{len(body)}-byte body; the writer is broken"
        )
        raise CodecError(msg)
    groups: dict[int, memoryview] = {}
    for kg, length in zip(order, lengths, strict=True):
        groups[kg] = body[pos : pos + length]
        pos += length
    return DecodedShard(owner, epoch, kind, groups)


def blob_spans(
    data: bytes | memoryview, key_groups: Mapping[int, bytes | memoryview]
) -> dict[int, tuple[int, int, int]]:
    """Return each key group's ``(offset, length, crc32)`` in an encoded shard.

    ``data`` is what :func:`encode_shard` returned for ``key_groups``; offsets
    count from the start of ``data``. The crc32 of each blob is computed here,
    so a reader of one blob checks it end to end.
    """
    order = sorted(key_groups)
    view = memoryview(data).cast("B")
    owner_len = _HEAD.unpack_from(view, _PRELUDE.size)[0]
    pos = _PRELUDE.size + _HEAD.size + owner_len + 12 * len(order)
    spans: dict[int, tuple[int, int, int]] = {}
    for kg in order:
        blob = key_groups[kg]
        length = len(blob)
        spans[kg] = (pos, length, crc32(blob))
        pos += length
    return spans


def pack_shards(
    key_groups: Mapping[int, bytes], max_shard_bytes: int
) -> list[dict[int, bytes]]:
    """Group consecutive key groups into shards of at most ``max_shard_bytes``.

    The bound counts blob bytes; the encoded shard adds 28 bytes, the owner name and
    12 bytes per key group. A blob larger than the bound gets a shard of its own.

    Raises:
        CodecError: ``max_shard_bytes < 1``.
    """
    if max_shard_bytes < 1:
        msg = f"max_shard_bytes={max_shard_bytes}; use >= 1 (sr3.ring.max.shard.bytes)"
        raise CodecError(msg)
    shards: list[dict[int, bytes]] = []
    current: dict[int, bytes] = {}
    size = 0
    for kg in sorted(key_groups):
        blob = key_groups[kg]
        if current and size + len(blob) > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[kg] = blob
        size += len(blob)
    if current:
        shards.append(current)
    return shards
