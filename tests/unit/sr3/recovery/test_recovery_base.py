"""Recovery lifecycle guards, timeline spans, least-loaded assignment, fault knobs."""

from __future__ import annotations

import itertools

import pytest

from sr3.errors import ConfigError, RecoveryError
from sr3.manifest import ShardMeta
from sr3.ports import NodeInfo
from sr3.recovery.base import (
    RecoveryLifecycle,
    RecoveryPhase,
    assign_least_loaded,
    ring_order,
)
from sr3.recovery.frames import RelayFaults

P = RecoveryPhase


def fake_clock() -> itertools.count[float]:
    return itertools.count(0.0, 0.5)


def test_phases_follow_the_diagram_and_record_the_timeline() -> None:
    ticks = fake_clock()
    life = RecoveryLifecycle(clock=lambda: next(ticks))
    for phase in (P.PLANNING, P.TRANSFERRING, P.REPLANNING, P.TRANSFERRING):
        life.move(phase, phase.value)
    life.move(P.INSTALLING)
    life.move(P.RESUMED)
    life.finish()
    assert [s.phase for s in life.timeline] == [
        "plan",
        "transfer",
        "replan",
        "transfer",
        "install",
        "resume",
    ]
    assert all(s.end_s >= s.start_s for s in life.timeline)
    assert life.timeline[0].to_dict()["seconds"] >= 0


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ((), P.TRANSFERRING),
        ((P.PLANNING,), P.INSTALLING),
        ((P.PLANNING, P.TRANSFERRING, P.INSTALLING), P.TRANSFERRING),
        ((P.PLANNING, P.TRANSFERRING, P.INSTALLING, P.RESUMED), P.FAILED),
    ],
)
def test_illegal_moves_raise(
    path: tuple[RecoveryPhase, ...], bad: RecoveryPhase
) -> None:
    life = RecoveryLifecycle()
    for phase in path:
        life.move(phase)
    with pytest.raises(RecoveryError):
        life.move(bad)


def test_any_unfinished_phase_may_fail() -> None:
    life = RecoveryLifecycle()
    life.move(P.PLANNING)
    life.move(P.FAILED)
    assert life.phase is P.FAILED


def shard(i: int, size: int, holders: tuple[str, ...]) -> ShardMeta:
    return ShardMeta(f"o@1#{i}", "o", 1, size, 0, (i,), "full", holders)


def node(n: str) -> NodeInfo:
    return NodeInfo(n, "127.0.0.1", 1)


def test_least_loaded_assignment_spreads_bytes_and_is_deterministic() -> None:
    ids = ["a", "b", "c", "d", "e"]
    shards = [
        shard(i, 100 + (i % 3), tuple(ids[(i + j) % 5] for j in range(3)))
        for i in range(40)
    ]
    live = {n: node(n) for n in ids}
    assigned, orphans = assign_least_loaded(shards, live)
    assert not orphans
    loads = {n: sum(s.size for s in v) for n, v in assigned.items()}
    fair = sum(s.size for s in shards) / len(ids)
    # each shard may only go to its 3 holders: within two shards of a fair share
    assert max(loads.values()) <= fair + 2 * 102
    assert assign_least_loaded(shards, live) == (assigned, orphans)
    for n, mine in assigned.items():
        assert all(n in s.holders for s in mine)
        assert [s.shard_id for s in mine] == sorted(
            (s.shard_id for s in mine), key=lambda x: int(x.split("#")[1])
        )


def test_shards_without_a_live_holder_are_reported() -> None:
    shards = [shard(0, 10, ("a", "b")), shard(1, 10, ("c",))]
    assigned, orphans = assign_least_loaded(shards, {"a": node("a")})
    assert [s.shard_id for s in orphans] == ["o@1#1"]
    assert list(assigned) == ["a"]


def test_ring_order_is_stable() -> None:
    assert ring_order(["c", "a", "b"]) == ring_order(["b", "c", "a"])


def test_relay_faults_parse() -> None:
    assert RelayFaults.parse("") == RelayFaults()
    got = RelayFaults.parse("delay_s=0.01, abort_after_frames=3")
    assert got == RelayFaults(delay_s=0.01, abort_after_frames=3)
    with pytest.raises(ConfigError):
        RelayFaults.parse("explode=1")
    with pytest.raises(ConfigError):
        RelayFaults.parse("delay_s=soon")
