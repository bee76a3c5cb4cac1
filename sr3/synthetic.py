"""Deterministic synthetic keyed snapshots for ``sr3 snapshot put/get`` and benches.

Key ``i`` is ``("k", i)`` with one field ``{"v": value}``. Values are slices of one
pseudo-random block per seed (``random.Random(seed).randbytes``), at an offset derived
from ``i``, so generating them costs a slice, not a random draw: hundreds of MB/s.

Epochs are numbered from 1: epoch 1 is the base (:func:`iter_key_groups`) and every
later epoch ``e`` is a delta (:func:`iter_delta_key_groups`) updating the keys that a
hash of ``(seed, e, i)`` selects with probability ``update_fraction``; their new
values depend on ``(seed, e, i)``. :func:`expected_value_at` replays that choice, so
a snapshot read back after any number of epochs is verified exactly.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sr3.codec import encode_key, encode_key_group_delta_raw, encode_key_group_raw
from sr3.errors import ConfigError
from sr3.keygroups import key_group_of_encoded

__all__ = [
    "SyntheticSpec",
    "expected_value",
    "expected_value_at",
    "is_updated",
    "iter_delta_key_groups",
    "iter_key_groups",
    "key_indices",
    "verify_key_group",
]

_BLOCK_BYTES = 1 << 20
_STRIDE = 0x9E3779B1  # odd, so i -> i * _STRIDE mod 2**20 is a bijection
_EPOCH_SHIFT = 0x632BE5AB  # odd: an update never reuses the key's previous offset
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, init=False)
class SyntheticSpec:
    """Parameters of a synthetic snapshot.

    Args:
        total_bytes: Sum of the value sizes of the base snapshot.
        keys: Number of keys; ``None`` means ``total_bytes // 1024`` (1 KiB values).
        seed: Seed of the value bytes and of the update choice.

    Attributes:
        total_bytes: As given.
        keys: The number of keys, resolved (always an int).
        seed: As given.

    Raises:
        ConfigError: ``keys`` is not in ``1..total_bytes``.
    """

    total_bytes: int
    keys: int
    seed: int

    def __init__(
        self, total_bytes: int, keys: int | None = None, seed: int = 0
    ) -> None:
        count = max(1, total_bytes // 1024) if keys is None else keys
        if not 1 <= count <= total_bytes:
            msg = (
                f"synthetic snapshot of {total_bytes} bytes with {count} keys: "
                "use at least one key and at least one byte per key"
            )
            raise ConfigError(msg)
        object.__setattr__(self, "total_bytes", total_bytes)
        object.__setattr__(self, "keys", count)
        object.__setattr__(self, "seed", seed)

    def value_size(self, i: int) -> int:
        """Return the size of key ``i``'s value; sizes differ by at most one byte."""
        base, extra = divmod(self.total_bytes, self.keys)
        return base + (1 if i < extra else 0)


@lru_cache(maxsize=4)
def _block(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _mix(seed: int, epoch: int, i: int) -> int:
    """splitmix64 of (seed, epoch, i): a fast, stable, well-spread 64-bit hash."""
    x = (seed * 0xD1B54A32D192ED03 + epoch * 0x8CB92BA72F3D8DD7 + i) & _MASK64
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _value(spec: SyntheticSpec, i: int, epoch: int) -> bytes:
    size = spec.value_size(i)
    block = _block(spec.seed, _BLOCK_BYTES + spec.value_size(0))
    offset = ((i + epoch * _EPOCH_SHIFT) * _STRIDE) % _BLOCK_BYTES
    return block[offset : offset + size]


def is_updated(spec: SyntheticSpec, i: int, epoch: int, update_fraction: float) -> bool:
    """Return whether the delta of ``epoch`` (>= 2) updates key ``i``."""
    return epoch >= 2 and _mix(spec.seed, epoch, i) < update_fraction * 2.0**64


def _index_of(spec: SyntheticSpec, key: tuple[Any, ...]) -> int | None:
    if len(key) == 2 and key[0] == "k" and type(key[1]) is int:
        i: int = key[1]
        if 0 <= i < spec.keys:
            return i
    return None


def expected_value(
    spec: SyntheticSpec, key: tuple[Any, ...]
) -> dict[str, bytes] | None:
    """Return the base fields of ``key``, or None when the spec has no such key."""
    return expected_value_at(spec, key, 1, 0.0)


def expected_value_at(
    spec: SyntheticSpec, key: tuple[Any, ...], epoch: int, update_fraction: float
) -> dict[str, bytes] | None:
    """Return the fields of ``key`` after the deltas of epochs ``2..epoch``.

    Returns None when the spec has no such key.
    """
    i = _index_of(spec, key)
    if i is None:
        return None
    for e in range(epoch, 1, -1):
        if is_updated(spec, i, e, update_fraction):
            return {"v": _value(spec, i, e)}
    return {"v": _value(spec, i, 0)}


@lru_cache(maxsize=2)
def _assignment(spec: SyntheticSpec, key_group_count: int) -> tuple[array[int], ...]:
    buckets = tuple(array("Q") for _ in range(key_group_count))
    for i in range(spec.keys):
        kg = key_group_of_encoded(encode_key(("k", i)), key_group_count)
        buckets[kg].append(i)
    return buckets


def key_indices(spec: SyntheticSpec, key_group_count: int, kg: int) -> array[int]:
    """Return the indices ``i`` of the keys in key group ``kg``, ascending.

    The assignment of all keys is computed once per (spec, G) and cached.

    Raises:
        ConfigError: ``key_group_count < 1`` or ``kg`` out of range.
    """
    if not 0 <= kg < key_group_count:
        msg = f"key group {kg} is outside 0..{key_group_count - 1}"
        raise ConfigError(msg)
    return array("Q", _assignment(spec, key_group_count)[kg])


def iter_key_groups(
    spec: SyntheticSpec, key_group_count: int
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(kg, FULL blob)`` of the base snapshot for every non-empty key group.

    Only one key group is held as Python objects at a time.
    """
    for kg, indices in enumerate(_assignment(spec, key_group_count)):
        if indices:
            entries = {encode_key(("k", i)): {"v": _value(spec, i, 0)} for i in indices}
            yield kg, encode_key_group_raw(entries)


def iter_delta_key_groups(
    spec: SyntheticSpec, key_group_count: int, epoch: int, update_fraction: float
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(kg, DELTA blob)`` of epoch ``epoch`` for key groups with updates.

    Raises:
        ConfigError: ``epoch < 2`` (epoch 1 is the base) or a fraction outside 0..1.
    """
    if epoch < 2 or not 0.0 <= update_fraction <= 1.0:
        msg = (
            f"synthetic delta epoch {epoch} fraction {update_fraction}: deltas start "
            "at epoch 2 (epoch 1 is the base) and update a fraction in 0..1"
        )
        raise ConfigError(msg)
    for kg, indices in enumerate(_assignment(spec, key_group_count)):
        upserts = {
            encode_key(("k", i)): {"v": _value(spec, i, epoch)}
            for i in indices
            if is_updated(spec, i, epoch, update_fraction)
        }
        if upserts:
            yield kg, encode_key_group_delta_raw(upserts, ())


def verify_key_group(
    spec: SyntheticSpec,
    kg: int,
    entries: Mapping[tuple[Any, ...], Any],
    *,
    key_group_count: int,
    epoch: int = 1,
    update_fraction: float = 0.0,
) -> list[tuple[Any, ...]]:
    """Return the keys of key group ``kg`` that are wrong, missing or unexpected.

    Args:
        spec: The generator's parameters.
        kg: The key group ``entries`` was read from.
        entries: Decoded entries, key to fields (``codec.decode_key_group``).
        key_group_count: G the snapshot was written with.
        epoch: Epoch read back (1 is the base).
        update_fraction: Fraction each delta epoch updated.

    Raises:
        ConfigError: ``kg`` is out of range.
    """
    bad: list[tuple[Any, ...]] = []
    expected = key_indices(spec, key_group_count, kg)
    for i in expected:
        key = ("k", i)
        if entries.get(key) != expected_value_at(spec, key, epoch, update_fraction):
            bad.append(key)
    wanted = set(expected)
    bad.extend(key for key in entries if _index_of(spec, key) not in wanted)
    return bad
