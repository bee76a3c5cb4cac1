"""Synthetic snapshots: determinism, exact verification across delta epochs."""

from __future__ import annotations

from typing import Any

import pytest

from sr3 import codec
from sr3.errors import ConfigError
from sr3.keygroups import key_group
from sr3.state import KeyedState
from sr3.synthetic import (
    SyntheticSpec,
    expected_value,
    expected_value_at,
    is_updated,
    iter_delta_key_groups,
    iter_key_groups,
    key_indices,
    verify_key_group,
)

G = 16
SPEC = SyntheticSpec(total_bytes=300_003, keys=1000, seed=11)


def entries_by_kg(blobs: dict[int, bytes]) -> dict[int, dict[tuple[Any, ...], Any]]:
    return {kg: codec.decode_key_group(blob).entries for kg, blob in blobs.items()}


def test_spec_defaults_and_validation() -> None:
    spec = SyntheticSpec(total_bytes=10 * 1024, keys=None, seed=1)
    assert spec.keys == 10 and spec.value_size(0) == 1024
    assert SyntheticSpec(100).keys == 1
    assert sum(SPEC.value_size(i) for i in range(SPEC.keys)) == SPEC.total_bytes
    with pytest.raises(ConfigError, match="at least one byte per key"):
        SyntheticSpec(total_bytes=10, keys=11)
    with pytest.raises(ConfigError):
        SyntheticSpec(total_bytes=0)


def test_base_snapshot_holds_every_key_once() -> None:
    blobs = dict(iter_key_groups(SPEC, G))
    assert list(blobs) == sorted(blobs)
    by_kg = entries_by_kg(blobs)
    seen: dict[tuple[Any, ...], Any] = {}
    for kg, entries in by_kg.items():
        assert all(key_group(key, G) == kg for key in entries)
        assert verify_key_group(SPEC, kg, entries, key_group_count=G) == []
        seen.update(entries)
    assert sorted(seen) == [("k", i) for i in range(SPEC.keys)]
    assert all(seen[key] == expected_value(SPEC, key) for key in seen)
    assert sum(len(fields["v"]) for fields in seen.values()) == SPEC.total_bytes


def test_generation_is_deterministic_and_seeded() -> None:
    assert dict(iter_key_groups(SPEC, G)) == dict(iter_key_groups(SPEC, G))
    other = SyntheticSpec(SPEC.total_bytes, SPEC.keys, seed=12)
    assert expected_value(other, ("k", 5)) != expected_value(SPEC, ("k", 5))
    values = {str(expected_value(SPEC, ("k", i))) for i in range(SPEC.keys)}
    assert len(values) == SPEC.keys  # distinct keys never share a value


def test_verify_reports_wrong_missing_and_unexpected_keys() -> None:
    kg, blob = next(iter(iter_key_groups(SPEC, G)))
    entries = dict(codec.decode_key_group(blob).entries)
    assert list(key_indices(SPEC, G, kg)) == sorted(i for _, i in entries)
    wrong, missing = sorted(entries)[:2]
    entries[wrong] = {"v": b"nope"}
    del entries[missing]
    foreign = next(("k", i) for i in range(SPEC.keys) if key_group(("k", i), G) != kg)
    entries[foreign] = expected_value(SPEC, foreign)
    entries[("x",)] = {"v": b""}
    bad = verify_key_group(SPEC, kg, entries, key_group_count=G)
    assert sorted(bad, key=repr) == sorted([wrong, missing, foreign, ("x",)], key=repr)
    assert expected_value(SPEC, ("k", SPEC.keys)) is None
    assert expected_value(SPEC, ("x",)) is None
    with pytest.raises(ConfigError):
        key_indices(SPEC, G, G)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_delta_epochs_verify_exactly(fraction: float) -> None:
    state = KeyedState(G)
    state.install(dict(iter_key_groups(SPEC, G)))
    for epoch in range(2, 6):
        delta = dict(iter_delta_key_groups(SPEC, G, epoch, fraction))
        updated = sum(len(codec.decode_key_group(b).entries) for b in delta.values())
        assert updated == pytest.approx(fraction * SPEC.keys, abs=60)
        assert all(codec.blob_kind(b) is codec.BlobKind.DELTA for b in delta.values())
        state.install(delta)
    for key, fields in state.items():
        assert fields == expected_value_at(SPEC, key, 5, fraction)
    full = state.snapshot(incremental=False)
    for kg, entries in entries_by_kg(full).items():
        assert (
            verify_key_group(
                SPEC, kg, entries, key_group_count=G, epoch=5, update_fraction=fraction
            )
            == []
        )
    if fraction:  # the base no longer verifies once keys were updated
        kg, entries = next(iter(entries_by_kg(full).items()))
        assert verify_key_group(SPEC, kg, entries, key_group_count=G)


def test_update_changes_the_value() -> None:
    i = next(i for i in range(SPEC.keys) if is_updated(SPEC, i, 2, 0.5))
    key = ("k", i)
    assert expected_value_at(SPEC, key, 2, 0.5) != expected_value(SPEC, key)
    assert expected_value_at(SPEC, key, 1, 0.5) == expected_value(SPEC, key)
    assert not is_updated(SPEC, i, 1, 1.0)


def test_delta_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="epoch 1 is the base"):
        list(iter_delta_key_groups(SPEC, G, 1, 0.5))
    with pytest.raises(ConfigError):
        list(iter_delta_key_groups(SPEC, G, 2, 1.5))
