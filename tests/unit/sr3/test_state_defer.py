"""KeyedState.defer: key groups taken when touched, all of them before a snapshot."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from sr3.errors import StateError
from sr3.state import KeyedState
from sr3.state_blobs import Blob

G = 16


class ChainOfBlobs:
    """A loader over a base and a delta held in memory, counting what it gave."""

    def __init__(self, base: Mapping[int, bytes], delta: Mapping[int, bytes]) -> None:
        self.chains = {kg: [base[kg]] for kg in base}
        for kg, blob in delta.items():
            self.chains.setdefault(kg, []).append(blob)
        self.taken: list[int] = []

    def take(self, key_group: int) -> dict[int, list[Blob]]:
        self.taken.append(key_group)
        return {key_group: list(self.chains[key_group])}

    def take_all(self) -> dict[int, list[Blob]]:
        left = [kg for kg in self.chains if kg not in self.taken]
        self.taken.extend(left)
        return {kg: list(self.chains[kg]) for kg in left}


def committed() -> tuple[KeyedState, ChainOfBlobs]:
    source = KeyedState(G)
    for i in range(100):
        source.for_key(("k", i))["n"] = i
    base = source.snapshot(incremental=False)
    source.mark_clean()
    source.for_key(("k", 1))["n"] = -1
    source.for_key(("k", 2)).clear()
    delta = source.snapshot(incremental=True)
    source.mark_clean()
    return source, ChainOfBlobs(base, delta)


def test_a_touched_key_takes_only_its_key_group() -> None:
    source, loader = committed()
    state = KeyedState(G)
    state.defer(loader.chains, loader)
    assert state.for_key(("k", 1))["n"] == -1
    assert ("n" in state.for_key(("k", 2))) is False
    assert len(set(loader.taken)) <= 2
    assert state.deferred
    assert state.stats().deferred_key_groups == len(loader.chains) - len(
        set(loader.taken)
    )


def test_a_full_snapshot_while_deferred_holds_the_untouched_keys() -> None:
    source, loader = committed()
    state = KeyedState(G)
    state.defer(loader.chains, loader)
    state.for_key(("k", 5))["n"] = 500
    full = state.snapshot(incremental=False)
    assert not state.deferred
    rebuilt = KeyedState(G)
    rebuilt.install(full)
    expected = dict(source.items())
    expected[("k", 5)] = {"n": 500}
    assert dict(rebuilt.items()) == expected


def test_a_delta_after_a_deferred_restore_holds_only_the_changes() -> None:
    _, loader = committed()
    state = KeyedState(G)
    state.defer(loader.chains, loader)
    state.for_key(("k", 7))["n"] = 70
    delta = state.snapshot(incremental=True)
    assert list(delta) == [state.key_group_of(("k", 7))]


def test_defer_needs_a_fresh_state() -> None:
    _, loader = committed()
    state = KeyedState(G)
    state.for_key(("x",))["n"] = 1
    with pytest.raises(StateError, match="fresh state"):
        state.defer(loader.chains, loader)
