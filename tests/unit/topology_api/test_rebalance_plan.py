"""The rebalance planner: which tasks stay, go and come; which requests are refused."""

from __future__ import annotations

import pytest

from topology_api.rebalance_plan import (
    ComponentInfo,
    RebalanceRequestError,
    TaskMoves,
    check_request,
    parse_targets,
    plan_moves,
)

COMPONENTS = {
    "count": ComponentInfo(tasks=2, stateful=True, max_tasks=8),
    "split": ComponentInfo(tasks=1, stateful=False, max_tasks=256),
}


@pytest.mark.parametrize(
    ("current", "tasks", "next_id", "moves"),
    [
        ([3, 4], 4, 9, TaskMoves((3, 4), (), (9, 10))),
        ([3, 4, 9, 10], 1, 11, TaskMoves((3,), (4, 9, 10), ())),
        ([3], 3, 11, TaskMoves((3,), (), (11, 12))),
        ([5, 6], 2, 7, TaskMoves((5, 6), (), ())),
    ],
)
def test_moves_keep_the_lowest_indexes_and_append_new_ids(
    current: list[int], tasks: int, next_id: int, moves: TaskMoves
) -> None:
    planned = plan_moves(current, tasks, next_id)
    assert planned == moves
    assert len(planned.after) == tasks
    # indexes keep their order: a kept task's index is unchanged
    assert list(planned.after[: len(planned.keep)]) == sorted(current)[:tasks]


def test_repeated_rebalances_up_and_down_stay_consistent() -> None:
    ids, next_id = [1, 2], 3
    for tasks in (4, 1, 3, 8, 2):
        moves = plan_moves(ids, tasks, next_id)
        assert set(moves.keep) | set(moves.retire) == set(ids)
        assert not set(moves.add) & set(ids)
        ids = sorted(moves.after)
        next_id = max([next_id - 1, *ids]) + 1
        assert len(ids) == tasks


def test_a_planner_refuses_zero_tasks_and_an_id_in_use() -> None:
    with pytest.raises(ValueError, match="at least 1 task"):
        plan_moves([1], 0, 2)
    with pytest.raises(ValueError, match="in use"):
        plan_moves([1, 2], 3, 2)


def test_targets_parse_component_equals_count() -> None:
    assert parse_targets(["count=4", " join = 2"]) == {"count": 4, "join": 2}


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (["count"], "write COMPONENT=N"),
        (["=3"], "write COMPONENT=N"),
        (["count=four"], "is not a task count"),
        (["count=2", "count=3"], "named twice"),
        ([], "nothing to rebalance"),
    ],
)
def test_malformed_targets_are_named(pairs: list[str], says: str) -> None:
    with pytest.raises(RebalanceRequestError, match=says):
        parse_targets(pairs)


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        ({"nosuch": 2}, "has no component 'nosuch'; its components: count, split"),
        ({"split": 2}, "is stateless.*its stateful bolts: count"),
        ({"count": 0}, r"can have 1\.\.8 tasks .*not 0"),
        ({"count": 9}, r"can have 1\.\.8 tasks .*not 9"),
    ],
)
def test_bad_requests_name_the_problem_and_the_fix(
    targets: dict[str, int], says: str
) -> None:
    with pytest.raises(RebalanceRequestError, match=says):
        check_request("wc", COMPONENTS, targets)


def test_a_request_within_the_maximum_passes() -> None:
    check_request("wc", COMPONENTS, {"count": 8})
    check_request("wc", COMPONENTS, {"count": 1})


def test_component_info_round_trips() -> None:
    info = ComponentInfo(3, True, 128)
    assert ComponentInfo.from_dict(info.to_dict()) == info


def test_a_component_with_a_fixed_task_count_is_refused_with_its_reason() -> None:
    why = "a KafkaSink keeps its pending outputs per task"
    components = {**COMPONENTS, "sink": ComponentInfo(2, True, 8, fixed=why)}
    with pytest.raises(RebalanceRequestError, match=f"keeps its 2 task.*{why}"):
        check_request("wc", components, {"sink": 3})
    check_request("wc", components, {"sink": 2, "count": 4})  # no change: fine
    # the live record carries the reason to the CLI, which checks first
    assert ComponentInfo.from_dict(components["sink"].to_dict()).fixed == why
    assert "fixed" not in COMPONENTS["count"].to_dict()
