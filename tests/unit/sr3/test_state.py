"""KeyedState: the dict-like view, lazy install, incremental and full snapshots."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sr3 import codec
from sr3.codec import BlobKind
from sr3.errors import StateError
from sr3.keygroups import key_group
from sr3.state import KeyedState

G = 32
Model = dict[tuple[Any, ...], dict[str, Any]]


def filled(keys: int = 200) -> KeyedState:
    state = KeyedState(G)
    for i in range(keys):
        view = state.for_key(("w", i))
        view["count"] = i
        view["seen"] = [i]
    return state


def decoded(blobs: dict[int, bytes]) -> dict[int, codec.KeyGroupBlob[Any]]:
    return {kg: codec.decode_key_group(blob) for kg, blob in blobs.items()}


def test_view_behaves_like_a_dict() -> None:
    state = KeyedState(G)
    view = state.for_key(("a", 1))
    assert len(view) == 0 and "x" not in view and view.get("x", 5) == 5
    with pytest.raises(KeyError):
        view["x"]
    with pytest.raises(KeyError):
        del view["x"]
    view["x"] = 1
    assert view.setdefault("x", 9) == 1 and view.setdefault("y", []) == []
    view.update(z="zz")
    assert dict(view.items()) == {"x": 1, "y": [], "z": "zz"}
    assert sorted(view) == ["x", "y", "z"] and len(view) == 3 and "z" in view
    assert view.pop("z") == "zz" and view.pop("z", None) is None
    del view["y"]
    assert view == {"x": 1} and state.for_key(("a", 1))["x"] == 1
    view.clear()
    assert len(view) == 0 and list(state.items()) == []
    assert "KeyState(('a', 1)" in repr(view) and view.key == ("a", 1)


def test_reads_mark_only_mutable_values() -> None:
    state = filled(1)
    state.snapshot(incremental=False)
    state.mark_clean()
    view = state.for_key(("w", 0))
    assert view["count"] == 0 and view.get("count") == 0
    assert state.snapshot(incremental=True) == {}
    view["seen"].append(1)  # an in-place change must reach the next delta
    (blob,) = decoded(state.snapshot(incremental=True)).values()
    assert blob.entries == {("w", 0): {"count": 0, "seen": [0, 1]}}


def test_incremental_snapshot_holds_only_changes() -> None:
    state = filled()
    state.snapshot(incremental=False)
    state.mark_clean()
    assert state.snapshot(incremental=True) == {}
    state.for_key(("w", 3))["count"] = 99
    state.for_key(("w", 4)).clear()
    state.for_key(("new",))["count"] = 1
    state.for_key(("ghost",))["x"] = 1
    del state.for_key(("ghost",))["x"]  # created and removed within the epoch
    blobs = decoded(state.snapshot(incremental=True))
    kgs = {key_group(k, G) for k in [("w", 3), ("w", 4), ("new",), ("ghost",)]}
    assert set(blobs) == kgs
    upserts = {k: v for b in blobs.values() for k, v in b.entries.items()}
    deletes = {k for b in blobs.values() for k in b.deletes}
    assert upserts == {("w", 3): {"count": 99, "seen": [3]}, ("new",): {"count": 1}}
    assert deletes == {("w", 4), ("ghost",)}
    assert all(b.kind is BlobKind.DELTA for b in blobs.values())


def test_unconfirmed_snapshot_is_included_again() -> None:
    state = filled(10)
    state.snapshot(incremental=False)
    state.mark_clean()
    state.for_key(("w", 1))["count"] = -1
    first = state.snapshot(incremental=True)  # never confirmed
    state.for_key(("w", 2))["count"] = -2
    second = decoded(state.snapshot(incremental=True))
    changed = {k for b in second.values() for k in b.entries}
    assert changed == {("w", 1), ("w", 2)} and first
    state.mark_clean()
    state.for_key(("w", 3))["count"] = -3
    third = state.snapshot(incremental=True)
    state.for_key(("w", 5))["count"] = -5  # after the snapshot, before the ack
    state.mark_clean()
    assert {k for b in decoded(third).values() for k in b.entries} == {("w", 3)}
    fourth = decoded(state.snapshot(incremental=True))
    assert {k for b in fourth.values() for k in b.entries} == {("w", 5)}


def test_lazy_install_decodes_only_touched_key_groups() -> None:
    full = filled().snapshot(incremental=False)
    state = KeyedState(G)
    state.install(full)
    stats = state.stats()
    assert stats.encoded_key_groups == len(full) and stats.decodes == 0
    assert state.for_key(("w", 7))["count"] == 7
    assert state.stats().decodes == 1 and state.stats().decoded_key_groups == 1
    again = state.snapshot(incremental=False)
    untouched = set(full) - {key_group(("w", 7), G)}
    assert all(again[kg] == full[kg] for kg in untouched)  # re-used, not re-encoded
    assert decoded(again) == decoded(full)
    assert state.stats().decodes == 1
    assert dict(state.items()) == dict(filled().items())
    assert state.stats().decodes == 1  # items() decodes without keeping


def test_eager_install_decodes_everything() -> None:
    full = filled().snapshot(incremental=False)
    state = KeyedState(G)
    state.install({kg: memoryview(blob) for kg, blob in full.items()}, lazy=False)
    assert state.stats().encoded_key_groups == 0
    assert state.stats().decoded_key_groups == len(full)
    assert state.key_groups_present() == sorted(full)


def test_delta_installed_into_decoded_key_group() -> None:
    source = filled(20)
    full = source.snapshot(incremental=False)
    source.mark_clean()
    source.for_key(("w", 1))["count"] = 100
    delta = source.snapshot(incremental=True)
    state = KeyedState(G)
    state.install(full)
    assert state.for_key(("w", 1))["count"] == 1
    state.install(delta)
    assert state.for_key(("w", 1))["count"] == 100


def _random_epoch(state: KeyedState, model: Model, rng: random.Random) -> None:
    for _ in range(rng.randrange(1, 60)):
        key = ("k", rng.randrange(120))
        view = state.for_key(key)
        fields = model.setdefault(key, {})
        op = rng.random()
        if op < 0.5:
            name = rng.choice("abc")
            fields[name] = view[name] = rng.choice([rng.random(), "s", b"b", None])
        elif op < 0.7:
            view.setdefault("log", []).append(op)
            fields.setdefault("log", []).append(op)
        elif op < 0.85 and fields:
            name = rng.choice(sorted(fields))
            del view[name], fields[name]
        else:
            view.clear()
            fields.clear()
        if not fields:
            del model[key]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twenty_epochs_of_deltas_rebuild_the_model(seed: int) -> None:
    rng = random.Random(seed)
    state = KeyedState(G)
    model: Model = {}
    _random_epoch(state, model, rng)
    chain = [state.snapshot(incremental=False)]
    state.mark_clean()
    for _ in range(20):
        _random_epoch(state, model, rng)
        chain.append(state.snapshot(incremental=True))
        state.mark_clean()
    for lazy in (True, False):
        restored = KeyedState(G)
        for blobs in chain:
            restored.install(blobs, lazy=lazy)
        assert dict(restored.items()) == model
        flat = decoded(restored.snapshot(incremental=False))
        assert flat == decoded(state.snapshot(incremental=False))
        by_blobs = {kg: [b[kg] for b in chain if kg in b] for kg in range(G)}
        merged = {
            kg: codec.decode_key_group(codec.merge_key_group_blobs(blobs))
            for kg, blobs in by_blobs.items()
            if blobs
        }
        assert {k: v for m in merged.values() for k, v in m.entries.items()} == model


def test_unencodable_value_names_key_and_field() -> None:
    state = KeyedState(G)
    state.for_key(("user", 7))["tags"] = {"a", "b"}
    with pytest.raises(StateError, match=r"key \('user', 7\) field 'tags' holds a set"):
        state.snapshot(incremental=True)
    state.for_key(("user", 7))["tags"] = ["a", "b"]
    assert state.snapshot(incremental=False)


def test_key_groups_not_held_are_refused() -> None:
    held = range(0, 8)
    state = KeyedState(G, held)
    outside = next(("w", i) for i in range(1000) if key_group(("w", i), G) >= 8)
    with pytest.raises(StateError, match="does not hold.*0..7"):
        state.for_key(outside)
    with pytest.raises(StateError, match="key group 9"):
        state.install({9: codec.encode_key_group({})})
    with pytest.raises(StateError, match="outside 0..31"):
        state.install({40: codec.encode_key_group({})})
    with pytest.raises(StateError, match="cannot be encoded"):
        state.for_key((object(),))
    with pytest.raises(StateError, match="key group count 0"):
        KeyedState(0)


def test_empty_key_groups_are_left_out_of_full_snapshots() -> None:
    state = KeyedState(G)
    state.for_key(("a",))["x"] = 1
    del state.for_key(("a",))["x"]
    assert state.snapshot(incremental=False) == {}
    state.install({3: codec.encode_key_group({})})
    assert state.snapshot(incremental=False) == {}
    assert state.key_group_of(("a",)) == key_group(("a",), G)
    assert state.key_group_count == G


def _fold_chain(*snapshots: dict[int, bytes]) -> dict[tuple[Any, ...], Any]:
    """What a restore of a chain of snapshots (oldest first) holds."""
    state = KeyedState(16)
    for blobs in snapshots:
        state.install(blobs)
    return {key: fields for key, fields in state.items()}


def test_handed_over_key_groups_are_written_whole_even_in_a_delta() -> None:
    sender, receiver = KeyedState(16), KeyedState(16)
    for k in range(40):
        sender.for_key((f"k{k}",))["n"] = k
    base = sender.snapshot(incremental=False)
    sender.mark_clean()
    moving = sorted(base)[:3]
    sender.for_key(("k1",))["n"] = 100  # a change in its delta too
    gone = sender.drop_key_groups(moving)
    assert gone == len(moving)
    delta = sender.snapshot(incremental=True)
    # the dropped key groups are emptied by a FULL blob each, in the delta
    for kg in moving:
        assert codec.blob_kind(delta[kg]) is BlobKind.FULL
        assert decoded({kg: delta[kg]})[kg].entries == {}
    after = _fold_chain(base, delta)
    assert all(sender.key_group_of(k) not in moving for k in after)
    assert len(after) == 40 - sum(len(decoded({kg: base[kg]})[kg].entries)
                                  for kg in moving)  # fmt: skip

    receiver.for_key(("other",))["n"] = 1
    r_base = receiver.snapshot(incremental=False)
    receiver.mark_clean()
    receiver.install({kg: base[kg] for kg in moving})
    receiver.write_whole(moving)
    r_delta = receiver.snapshot(incremental=True)
    assert set(r_delta) == set(moving)
    r_after = _fold_chain(r_base, r_delta)
    moved = {k: v for k, v in _fold_chain(base).items()
             if receiver.key_group_of(k) in moving}  # fmt: skip
    assert r_after == {("other",): {"n": 1}, **moved}
    receiver.mark_clean()
    assert receiver.snapshot(incremental=True) == {}  # written once, confirmed
