"""The key-groups planner: the fewest moves to a balanced table, in batches."""

from __future__ import annotations

from collections import Counter

import pytest

from sr3.keygroups import range_table
from topology_api.rebalance_plan import KeyGroupMove, batch_moves, plan_key_groups


def apply(table: list[int], moves: list[KeyGroupMove]) -> list[int]:
    after = list(table)
    for move in moves:
        assert after[move.key_group] == move.sender
        after[move.key_group] = move.receiver
    return after


@pytest.mark.parametrize(
    ("before", "after", "fewest"),
    [
        (2, 4, 128),  # each task gives half of its range to a new one
        (4, 1, 192),  # everything but task 0's quarter
        (1, 3, 170),  # task 0 keeps 86 of 256
        (3, 4, 64),  # each of 3 gives ~21 to the new task
        (4, 3, 64),  # task 3's 64 go to the three others
        (5, 5, 0),
    ],
)
def test_the_plan_balances_the_table_with_the_fewest_moves(
    before: int, after: int, fewest: int
) -> None:
    table = range_table(before, 256)
    moves = plan_key_groups(table, after)
    assert len(moves) == fewest
    assert len({m.key_group for m in moves}) == len(moves)  # each moves once
    owned = Counter(apply(table, moves))
    assert set(owned) == set(range(after))
    assert max(owned.values()) - min(owned.values()) <= 1
    # no sender also receives: a key group never passes through a task
    assert not {m.sender for m in moves} & {m.receiver for m in moves}


def test_an_uneven_table_keeps_the_extra_key_groups_where_they_are() -> None:
    # 10 key groups on 3 tasks as 4/4/2: balanced is 4/3/3, one move
    table = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    moves = plan_key_groups(table, 3)
    assert moves == [KeyGroupMove(7, 1, 2)]


def test_replanning_after_a_batch_gives_the_rest_of_the_plan() -> None:
    table = range_table(2, 256)
    moves = plan_key_groups(table, 4)
    first = batch_moves(moves, 16)[0]
    rest = plan_key_groups(apply(table, first), 4)
    assert {m.key_group for m in rest} == {m.key_group for m in moves} - {
        m.key_group for m in first
    }


def test_batches_hold_every_move_once_and_spread_over_the_pairs() -> None:
    moves = plan_key_groups(range_table(2, 256), 4)
    batches = batch_moves(moves, 16)
    assert [len(b) for b in batches] == [16] * 8
    assert sorted(m.key_group for b in batches for m in b) == sorted(
        m.key_group for m in moves
    )
    for batch in batches:
        # both pairs (0 -> 2, 1 -> 3) move in every batch, 8 key groups each
        assert Counter((m.sender, m.receiver) for m in batch) == {
            (0, 2): 8,
            (1, 3): 8,
        }


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot share"):
        plan_key_groups(range_table(2, 8), 9)
    with pytest.raises(ValueError, match="at least 1"):
        batch_moves([], 0)
