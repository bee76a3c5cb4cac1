"""Codec: keys, values, key-group blobs, merges and the shard container."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sr3 import codec
from sr3.codec import BlobKind
from sr3.errors import ChecksumError, CodecError
from sr3.manifest import ShardMeta

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(),  # beyond msgpack's 64 bits too, as Python and Storm's JSON allow
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
key_fields = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=6
)
state_keys = st.lists(key_fields, max_size=4).map(tuple)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=4)
    ),
    max_leaves=12,
)
field_maps = st.dictionaries(st.text(max_size=8), values, max_size=3)
entry_maps = st.dictionaries(state_keys, field_maps, max_size=8)
small_keys = st.tuples(st.sampled_from("abcdef"), st.integers(0, 3))
small_fields = st.dictionaries(st.sampled_from("vw"), st.integers(0, 9), max_size=2)
deltas = st.tuples(
    st.dictionaries(small_keys, small_fields, max_size=6),
    st.lists(small_keys, max_size=6),
)
blob_maps = st.dictionaries(
    st.integers(0, 40_000), st.binary(max_size=300), max_size=12
)


@given(state_keys)
def test_key_round_trip_is_canonical(key: tuple[Any, ...]) -> None:
    encoded = codec.encode_key(key)
    decoded = codec.decode_key(encoded)
    assert decoded == key
    assert codec.encode_key(decoded) == encoded


@given(values)
def test_value_round_trip(value: Any) -> None:
    assert codec.decode_value(codec.encode_value(value)) == value


def test_ints_of_any_size_round_trip_as_distinct_keys() -> None:
    # a counter past 2**64 used to fail the bolt's checkpoint on every try
    edges = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40]
    edges += [-n for n in edges]
    keys = [codec.encode_key((n,)) for n in edges]
    assert [codec.decode_key(k) for k in keys] == [(n,) for n in edges]
    assert len(set(keys)) == len(set(edges))
    entries = {(n,): {"total": n * 3, "seen": [n, -n]} for n in edges}
    blob = codec.encode_key_group(entries)
    assert codec.decode_key_group(blob).entries == entries
    later = codec.encode_key_group_delta({(10**40,): {"total": 7**90}}, [(2**64,)])
    merged = codec.decode_key_group(codec.merge_key_group_blobs([blob, later]))
    assert merged.entries[(10**40,)] == {"total": 7**90}
    assert (2**64,) not in merged.entries


def test_values_msgpack_lacks_are_named() -> None:
    with pytest.raises(CodecError, match="a set value cannot be encoded"):
        codec.encode_value({1, 2})


def test_values_keep_lists_and_keys_become_tuples() -> None:
    entries = {("a", ("n", 1)): {"seen": [1, [2, 3]], "m": {1: b"x"}}}
    blob = codec.decode_key_group(codec.encode_key_group(entries))
    assert blob.entries == entries
    assert type(blob.entries[("a", ("n", 1))]["seen"]) is list
    assert codec.decode_value(codec.encode_value((1, 2))) == [1, 2]


@given(entry_maps)
def test_full_blob_round_trip(entries: dict[tuple[Any, ...], Any]) -> None:
    blob = codec.encode_key_group(entries)
    assert codec.blob_kind(blob) is BlobKind.FULL
    decoded = codec.decode_key_group(memoryview(blob))
    assert decoded.kind is BlobKind.FULL
    assert decoded.entries == entries
    assert decoded.deletes == []


@given(entry_maps, st.lists(state_keys, max_size=5))
def test_delta_blob_round_trip(
    upserts: dict[tuple[Any, ...], Any], deletes: list[tuple[Any, ...]]
) -> None:
    blob = codec.encode_key_group_delta(upserts, deletes)
    decoded = codec.decode_key_group(blob)
    assert (decoded.kind, decoded.entries, decoded.deletes) == (
        BlobKind.DELTA,
        upserts,
        deletes,
    )


@given(
    st.dictionaries(small_keys, small_fields, max_size=8),
    st.lists(deltas, max_size=6),
)
def test_merge_equals_sequential_apply(
    base: dict[tuple[Any, ...], Any], chain: list[tuple[dict[Any, Any], list[Any]]]
) -> None:
    blobs = [codec.encode_key_group(base)]
    blobs += [codec.encode_key_group_delta(up, dels) for up, dels in chain]
    expected = base
    for blob in blobs[1:]:
        expected = codec.apply_delta(expected, codec.decode_key_group(blob))
    merged = codec.decode_key_group(codec.merge_key_group_blobs(blobs))
    assert merged.kind is BlobKind.FULL
    assert merged.entries == expected
    if chain:  # deltas merged without their base apply like the chain
        only_deltas = codec.decode_key_group(codec.merge_key_group_blobs(blobs[1:]))
        assert only_deltas.kind is BlobKind.DELTA
        assert codec.apply_delta(base, only_deltas) == expected


def test_merge_starts_at_last_full_and_rejects_nothing() -> None:
    old = codec.encode_key_group({("a",): {"v": 1}})
    delta = codec.encode_key_group_delta({("b",): {"v": 2}}, [])
    new = codec.encode_key_group({("c",): {"v": 3}})
    merged = codec.decode_key_group(codec.merge_key_group_blobs([old, delta, new]))
    assert merged.entries == {("c",): {"v": 3}}
    assert codec.merge_key_group_blobs([new]) == new
    with pytest.raises(CodecError, match="at least one"):
        codec.merge_key_group_blobs([])


def test_blob_errors_name_the_problem() -> None:
    blob = codec.encode_key_group({("a",): {"v": 1}})
    with pytest.raises(CodecError, match="version 2"):
        codec.decode_key_group(bytes([2]) + blob[1:])
    with pytest.raises(CodecError, match="kind tag"):
        codec.decode_key_group(blob[:1] + b"X" + blob[2:])
    with pytest.raises(CodecError, match="malformed"):
        codec.decode_key_group(blob[:-1])
    with pytest.raises(CodecError, match="cannot be encoded"):
        codec.encode_key_group({("a",): {"v": {1, 2}}})
    with pytest.raises(CodecError, match="cannot be encoded"):
        codec.encode_key((object(),))
    with pytest.raises(CodecError, match="not a tuple"):
        codec.decode_key(codec.encode_value("x"))


@given(
    st.text(max_size=30),
    st.integers(0, 2**63),
    st.sampled_from(["full", "delta"]),
    blob_maps,
)
def test_shard_round_trip(
    owner: str, epoch: int, kind: str, blobs: dict[int, bytes]
) -> None:
    data = codec.encode_shard(owner, epoch, kind, blobs)
    shard = codec.decode_shard(data)
    assert (shard.owner, shard.epoch, shard.kind) == (owner, epoch, kind)
    assert list(shard.key_groups) == sorted(blobs)
    assert {kg: bytes(view) for kg, view in shard.key_groups.items()} == blobs
    again = codec.decode_shard(memoryview(bytearray(data)))
    assert again.key_groups.keys() == shard.key_groups.keys()


@given(st.text(max_size=30), st.sampled_from(["full", "delta"]), blob_maps)
def test_blob_spans_locate_each_key_groups_bytes_and_travel_in_metadata(
    owner: str, kind: str, blobs: dict[int, bytes]
) -> None:
    data = codec.encode_shard(owner, 4, kind, blobs)
    spans = codec.blob_spans(data, blobs)
    for kg, (offset, length, crc) in spans.items():
        assert data[offset : offset + length] == blobs[kg]
        assert crc == zlib.crc32(blobs[kg])
    order = tuple(sorted(blobs))
    meta = ShardMeta(
        "o@4#0", owner, 4, len(data), zlib.crc32(data), key_groups=order,
        kind=kind, spans=tuple(spans[kg] for kg in order),
    )  # fmt: skip
    again = ShardMeta.from_dict(meta.to_dict())
    assert again == meta
    assert all(again.span(kg) == spans[kg] for kg in order)
    assert again.span(2**32) is None
    older = ShardMeta.from_dict({**meta.to_dict(), "spans": []})
    assert older.spans == () and all(older.span(kg) is None for kg in order)


@settings(max_examples=200)
@given(blob_maps, st.data())
def test_flipped_byte_is_detected(blobs: dict[int, bytes], data: st.DataObject) -> None:
    shard = bytearray(codec.encode_shard("owner", 3, "delta", blobs))
    index = data.draw(st.integers(0, len(shard) - 1))
    shard[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CodecError) as info:
        codec.decode_shard(bytes(shard), shard_id="o@3#0")
    assert type(info.value) is (CodecError if index == 0 else ChecksumError)


def test_verified_shards_skip_only_the_redundant_body_crc() -> None:
    data = codec.encode_shard("o", 1, "full", {0: b"abc", 5: b"de"})
    # the manifest's crc32 already covered these bytes: no second crc pass
    shard = codec.decode_shard(data, shard_id="o@1#0", verified=True)
    assert {kg: bytes(v) for kg, v in shard.key_groups.items()} == {
        0: b"abc",
        5: b"de",
    }
    # version and length are still checked
    with pytest.raises(CodecError, match="version 9"):
        codec.decode_shard(bytes([9]) + data[1:], verified=True)
    with pytest.raises(ChecksumError, match="truncated"):
        codec.decode_shard(data[:-1], verified=True)


def test_shard_errors_name_the_fix() -> None:
    data = codec.encode_shard("o", 1, "full", {0: b"abc", 5: b"de"})
    with pytest.raises(CodecError, match="version 9.*upgrade sr3"):
        codec.decode_shard(bytes([9]) + data[1:], shard_id="o@1#0")
    with pytest.raises(ChecksumError, match="o@1#0.*truncated.*another replica"):
        codec.decode_shard(data[:-1], shard_id="o@1#0")
    with pytest.raises(ChecksumError, match="crc32.*another replica") as info:
        codec.decode_shard(data[:-1] + b"\x00")
    assert info.value.retriable
    with pytest.raises(CodecError, match="version None"):
        codec.decode_shard(b"")
    with pytest.raises(CodecError, match="kind"):
        codec.encode_shard("o", 1, "partial", {})
    with pytest.raises(CodecError, match="epoch"):
        codec.encode_shard("o", -1, "full", {})


def test_decode_shard_does_not_decode_blobs() -> None:
    garbage = {1: b"\xff\x00 not msgpack", 2: b""}
    shard = codec.decode_shard(codec.encode_shard("o", 1, "full", garbage))
    assert bytes(shard.key_groups[1]) == garbage[1]
    assert bytes(shard.key_groups[2]) == b""


@given(
    st.dictionaries(st.integers(0, 500), st.binary(max_size=50), max_size=30),
    st.integers(1, 120),
)
def test_pack_shards(blobs: dict[int, bytes], bound: int) -> None:
    shards = codec.pack_shards(blobs, bound)
    flat = [kg for shard in shards for kg in shard]
    assert flat == sorted(blobs)
    for i, shard in enumerate(shards):
        size = sum(len(b) for b in shard.values())
        assert size <= bound or len(shard) == 1
        assert shard == {kg: blobs[kg] for kg in shard}
        if i + 1 < len(shards):  # greedy: the next key group did not fit
            first_next = next(iter(shards[i + 1].values()))
            assert size + len(first_next) > bound
    with pytest.raises(CodecError):
        codec.pack_shards(blobs, 0)


def test_meta_round_trip_unchanged() -> None:
    raw = {"owner": "o", "epoch": 1, "key_groups": [1, 2]}
    assert codec.unpack_meta(codec.pack_meta(raw)) == raw
