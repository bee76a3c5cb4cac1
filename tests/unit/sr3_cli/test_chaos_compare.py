"""How a chaos schedule's end is held to the failure-free run's (``--compare``)."""

from __future__ import annotations

from typing import Any

import pytest

from sr3.errors import ConfigError
from sr3_cli.chaos_compare import (
    AUTO,
    EXACT,
    UNORDERED,
    Comparison,
    choose_comparison,
    same_unordered,
    state_difference,
)

JOIN: dict[str, Any] = {"join": {("k0",): {"L": [3, 1, 2], "R": [5]}}}
REORDERED: dict[str, Any] = {"join": {("k0",): {"L": [1, 2, 3], "R": [5]}}}


def test_lists_at_any_depth_agree_in_any_order_and_keep_their_type() -> None:
    value = {"a": [3, [2, 1], "x"], "b": (2, 1), "c": 7}
    assert same_unordered({"a": ["x", [1, 2], 3], "b": (1, 2), "c": 7}, value)
    assert not same_unordered({"a": ["x", [1, 2], 3], "b": [1, 2], "c": 7}, value)
    assert not same_unordered({"a": ["x", [1, 2], 3], "b": (1, 2), "c": 8}, value)


def test_floats_summed_in_another_order_agree_and_other_floats_do_not() -> None:
    one, other = 0.1 + 0.2 + 0.3, 0.3 + 0.2 + 0.1
    assert one != other  # rounded otherwise in the last bit
    assert same_unordered({"avg": [one, 2.5]}, {"avg": [2.5, other]})
    assert not same_unordered({"avg": one}, {"avg": one * (1 + 1e-6)})
    assert same_unordered(float("nan"), float("nan"))
    assert not same_unordered(1.0, "1.0")
    assert not same_unordered(True, 1.0)


def test_a_reordered_list_differs_exactly_and_agrees_unordered() -> None:
    assert state_difference(REORDERED, JOIN).startswith("join: 1 keys differ")
    assert state_difference(REORDERED, JOIN, Comparison(unordered=True)) == ""


@pytest.mark.parametrize(
    "got",
    [
        {"join": {("k0",): {"L": [3, 1], "R": [5]}}},  # a row lost
        {"join": {("k0",): {"L": [3, 1, 2, 2], "R": [5]}}},  # a row twice
        {"join": {("k0",): {"L": [3, 1, 2], "R": [5]}, ("k1",): {"L": [9]}}},
    ],
)
def test_unordered_still_catches_a_lost_or_duplicated_item(got: Any) -> None:
    reason = state_difference(got, JOIN, Comparison(unordered=True))
    assert reason.startswith("join: 1 keys differ")


def test_auto_is_exact_when_two_failure_free_runs_end_alike() -> None:
    chosen = choose_comparison(AUTO, "t.py", [(JOIN, {"s": 1}), (JOIN, {"s": 1})])
    assert chosen.name == EXACT
    assert chosen.outputs


def test_auto_compares_unordered_when_two_runs_differ_in_list_order() -> None:
    chosen = choose_comparison(AUTO, "t.py", [(JOIN, None), (REORDERED, None)])
    assert chosen.name == UNORDERED
    assert "join" in chosen.note


def test_auto_drops_the_outputs_only_where_the_two_runs_disagree_on_them() -> None:
    chosen = choose_comparison(
        AUTO, "t.py", [(JOIN, {"sink": {"k0": 1}}), (JOIN, {"sink": {"k0": 2}})]
    )
    assert chosen.name == UNORDERED
    assert not chosen.outputs
    assert "last outputs not compared" in chosen.note


def test_auto_compares_unordered_when_two_runs_differ_in_float_rounding() -> None:
    sums = {"avg": {("k0",): 0.1 + 0.2 + 0.3}}
    again = {"avg": {("k0",): 0.3 + 0.2 + 0.1}}
    chosen = choose_comparison(AUTO, "t.py", [(sums, None), (again, None)])
    assert chosen.name == UNORDERED
    assert "float rounding (avg)" in chosen.note


def test_auto_refuses_a_topology_whose_runs_differ_beyond_order() -> None:
    other = {"join": {("k0",): {"L": [1, 2], "R": [5]}}}
    with pytest.raises(ConfigError, match=r"t\.py end in different states"):
        choose_comparison(AUTO, "t.py", [(JOIN, None), (other, None)])


def test_forced_modes_need_one_failure_free_run() -> None:
    assert choose_comparison(EXACT, "t.py", [(JOIN, None)]).name == EXACT
    assert choose_comparison(UNORDERED, "t.py", [(JOIN, None)]).name == UNORDERED
