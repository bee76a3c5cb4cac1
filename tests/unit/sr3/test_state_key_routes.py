"""A key's stored route: hidden from the bolt, kept through snapshots and restores."""

from __future__ import annotations

from sr3.key_state import ROUTE_FIELD
from sr3.state import KeyedState
from topology_api.java_hash import (
    IntegerBoxing,
    fields_task_index,
    key_task_index,
    route_hash,
)


def test_a_route_is_stored_with_the_key_but_hidden_from_its_fields() -> None:
    state = KeyedState(8)
    view = state.for_key((7, "cart"), route=route_hash([7]))
    view["n"] = 1
    assert dict(view) == {"n": 1}
    assert len(view) == 1
    assert list(state.items()) == [((7, "cart"), {"n": 1})]
    assert list(state.routed_items()) == [((7, "cart"), route_hash([7]), {"n": 1})]
    assert view.saved() == {ROUTE_FIELD: route_hash([7]), "n": 1}


def test_removing_the_last_field_removes_the_key_and_its_route() -> None:
    state = KeyedState(8)
    view = state.for_key(("u", "p"), route=5)
    view["n"] = 1
    del view["n"]
    assert list(state.routed_items()) == []


def test_routes_survive_full_and_delta_snapshots() -> None:
    state = KeyedState(4)
    state.for_key((1, "a"), route=11)["n"] = 1
    full = state.snapshot(incremental=False)
    state.mark_clean()
    state.for_key((2, "b"), route=22)["n"] = 2
    delta = state.snapshot(incremental=True)
    restored = KeyedState(4)
    restored.install(full)
    restored.install(delta)
    assert sorted(restored.routed_items()) == [
        ((1, "a"), 11, {"n": 1}),
        ((2, "b"), 22, {"n": 2}),
    ]


def test_keys_without_a_route_store_exactly_what_they_did_before() -> None:
    plain = KeyedState(4)
    plain.for_key(("w",))["n"] = 3
    assert list(plain.routed_items()) == [(("w",), None, {"n": 3})]
    assert plain.for_key(("w",)).saved() == {"n": 3}


def test_a_key_belongs_to_the_task_its_grouping_values_route_to() -> None:
    for tasks in (1, 2, 3, 4, 7):
        for user in (-5, -1, 0, 3, 2**40, "ünï"):
            for boxing in IntegerBoxing:
                route = route_hash([user], boxing)
                expected = fields_task_index([user], tasks, boxing)
                # a (user, page) state key routed by its user
                assert key_task_index((user, "p"), route, tasks, boxing) == expected
                # a key that is its own grouping values needs no stored route
                assert key_task_index((user,), None, tasks, boxing) == expected


def test_an_empty_key_is_a_global_groupings_and_belongs_to_the_lowest_task() -> None:
    assert key_task_index((), None, 5) == 0
