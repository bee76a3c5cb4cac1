"""Native mode's generation fencing: what owners drop, and when spouts resume."""

from __future__ import annotations

import pytest

from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import GENERATION_KEY, bolt_tuple_msg, parse_shell_msg
from storm_bridge.native import BoltAgent, SpoutAgent
from storm_bridge.native_coordinator import NativeCoordinator
from tests.unit.storm_bridge.test_native import (
    OWNERS,
    SPOUTS,
    Clock,
    MemoryLog,
    MemoryStore,
)
from zk.epochs import EpochControl, Phase


def _coordinator(
    store: MemoryStore, clock: Clock, scope: str = "global"
) -> NativeCoordinator:
    return NativeCoordinator(
        store=store,
        log=MemoryLog(),
        topology="wc",
        interval_s=1.0,
        timeout_s=10.0,
        clock=clock,
        scope=scope,
    )


def _restored(agent: BoltAgent, generation: int) -> None:
    restore = EpochControl(Phase.RESTORE, 4, generation)
    assert agent.action(restore) == BoltAgent.RESTORE
    agent.done(restore, BoltAgent.RESTORE)


def test_tuples_of_trees_older_than_the_restore_are_stale_however_late() -> None:
    agent = BoltAgent(bumped=False)
    agent.action(EpochControl(Phase.RUNNING, 4, 0))
    assert agent.stale(0) is False  # nothing restored yet: all count
    _restored(agent, 2)
    agent.action(EpochControl(Phase.RUNNING, 4, 2))
    agent.action(EpochControl(Phase.PAUSE, 5, 2))  # long after the spouts resumed
    assert agent.stale(1) is True
    assert agent.stale(0) is True
    assert agent.stale(2) is False
    assert agent.stale(3) is False
    assert agent.fenced is True


def test_a_first_start_owner_fences_generations_before_the_one_it_joins() -> None:
    agent = BoltAgent(bumped=False)
    agent.action(EpochControl(Phase.RUNNING, 4, 2))
    assert agent.stale(1) is True  # rolled back before this task took part
    assert agent.stale(2) is False


def test_a_restarted_owner_fences_nothing_before_its_restore() -> None:
    agent = BoltAgent(bumped=True)
    agent.min_generation = 3
    agent.action(EpochControl(Phase.ROLLBACK, 4, 3))
    assert agent.stale(2) is False  # the restore overwrites what it counts
    _restored(agent, 3)
    assert agent.stale(2) is True


def test_an_owner_is_fenced_only_while_every_data_tuple_carries_a_generation() -> None:
    agent = BoltAgent(bumped=False)
    assert agent.fenced is False  # nothing seen: the quiet time still applies
    assert agent.stale(0) is False
    assert agent.fenced is True
    assert agent.stale(None) is None  # the caller falls back to the quiet time
    assert agent.fenced is False


def test_a_spout_emits_in_generation_zero_until_it_follows_one() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    assert agent.emit_generation == 0
    agent.follow(3)
    assert agent.emit_generation == 3


@pytest.mark.parametrize("fenced", [True, False])
def test_a_rollback_waits_for_trees_in_flight_only_where_tuples_may_lack_a_generation(
    fenced: bool,
) -> None:
    agent = SpoutAgent(name="lines/0", bumped=False, fenced=fenced)
    agent.follow(0)
    agent.track("a", offset=1)  # a tree lost with a dead worker: never acked
    pause = EpochControl(Phase.PAUSE, 5, 0)
    rollback = EpochControl(Phase.ROLLBACK, 4, 1)
    # a snapshot must cover every tree emitted, with or without generations
    assert agent.may_report(pause) is False
    # owners drop the lost tree's tuples by generation wherever they come;
    # waiting would hold the topology until Storm times the tree out
    assert agent.may_report(rollback) is fenced
    agent.acked(1)
    assert agent.may_report(pause) is True
    assert agent.may_report(rollback) is True


def _to_restore(coordinator: NativeCoordinator, store: MemoryStore) -> None:
    coordinator.step()
    store.bump_generation()
    assert coordinator.step().phase is Phase.ROLLBACK
    store.report_all(SPOUTS, {})
    assert coordinator.step().phase is Phase.RESTORE


def test_spouts_resume_at_once_when_every_owner_is_fenced() -> None:
    store, clock = MemoryStore(), Clock()
    coordinator = _coordinator(store, clock)
    _to_restore(coordinator, store)
    store.report_all(OWNERS, {"dropped": 0, "fenced": True})
    running = coordinator.step()
    assert (running.phase, running.generation) == (Phase.RUNNING, 1)


@pytest.mark.parametrize("fenced", [False, None], ids=["untagged", "old-report"])
def test_an_owner_without_generations_keeps_the_quiet_time(fenced: object) -> None:
    store, clock = MemoryStore(), Clock()
    coordinator = _coordinator(store, clock)
    _to_restore(coordinator, store)
    store.report_all({"wc/count/0"}, {"dropped": 0, "fenced": True})
    store.report_all({"wc/count/1"}, {"dropped": 0, "fenced": fenced})
    assert coordinator.step().phase is Phase.RESTORE
    clock.now += 1.0
    assert coordinator.step().phase is Phase.RUNNING


def test_a_rollback_asked_before_the_first_record_rolls_back() -> None:
    store, clock = MemoryStore(), Clock()
    coordinator = _coordinator(store, clock)
    store.request_rollback(None)  # a tree failed before the coordinator wrote
    first = coordinator.step()
    assert (first.phase, first.generation) == (Phase.ROLLBACK, 1)


def test_a_first_record_without_a_rollback_is_running() -> None:
    store, clock = MemoryStore(), Clock()
    assert _coordinator(store, clock).step().phase is Phase.RUNNING


def test_the_generation_travels_in_emits_and_tuples() -> None:
    emit = parse_shell_msg(
        {"command": "emit", "tuple": [1], "id": 7, GENERATION_KEY: 2},
        component="lines",
        task_id=3,
    )
    assert emit.generation == 2
    plain = parse_shell_msg({"command": "emit", "tuple": [1]}, component="c", task_id=1)
    assert plain.generation is None
    assert bolt_tuple_msg("1", "lines", "default", 3, [1], 2)[GENERATION_KEY] == 2
    assert GENERATION_KEY not in bolt_tuple_msg("1", "lines", "default", 3, [1])


def test_a_generation_that_is_not_an_int_is_refused_naming_the_key() -> None:
    with pytest.raises(MultilangProtocolError, match=GENERATION_KEY):
        parse_shell_msg(
            {"command": "emit", "tuple": [1], GENERATION_KEY: "2"},
            component="lines",
            task_id=3,
        )


def test_a_tuple_without_generation_falls_back_to_the_rollbacks_running() -> None:
    agent = BoltAgent(bumped=False)
    agent.action(EpochControl(Phase.RUNNING, 4, 0))
    _restored(agent, 1)
    rollback = EpochControl(Phase.RESTORE, 4, 1)
    running = EpochControl(Phase.RUNNING, 4, 1)
    assert agent.straggler(None, lambda: rollback) == BoltAgent.UNTAGGED
    assert agent.straggler(0, lambda: rollback) == BoltAgent.STALE
    assert agent.straggler(1, lambda: rollback) is None
    assert agent.straggler(None, lambda: running) is None
    assert agent.straggler(None, lambda: rollback) is None  # resumed: counted
    assert agent.straggler(0, lambda: running) == BoltAgent.STALE  # still fenced
