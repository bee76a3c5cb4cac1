"""The native checkpoint protocol's state machine, against an in-memory store."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pytest

from sr3.errors import ConfigError
from storm_bridge.native import (
    MAX_REPLAYS,
    OWNER,
    SPOUT,
    BoltAgent,
    SpoutAgent,
    checkpoint_mode,
    require_ring,
)
from storm_bridge.native_coordinator import NativeCoordinator
from zk.checkpoints import CommitRecord
from zk.epoch_control import EpochControl, Phase

SPOUTS = {"lines/0", "lines/1"}
OWNERS = {"wc/count/0", "wc/count/1"}


class MemoryStore:
    """The records of :mod:`zk.epochs`, in memory."""

    def __init__(self) -> None:
        self.current: EpochControl | None = None
        self.gen = 0
        self.tasks: dict[str, set[str]] = {SPOUT: set(SPOUTS), OWNER: set(OWNERS)}
        self.by_step: dict[str, dict[str, Any]] = {}

    def control(self, *, fresh: bool = False) -> EpochControl | None:
        return self.current

    def set_control(self, control: EpochControl) -> None:
        self.current = control

    def generation(self) -> int:
        return self.gen

    def bump_generation(self) -> int:
        self.gen += 1
        return self.gen

    def request_rollback(self, seen: int | None) -> int:
        if seen is not None and self.gen > seen:
            return self.gen
        return self.bump_generation()

    def registered(self, kind: str) -> set[str]:
        return set(self.tasks[kind])

    def reports(self, step: str) -> dict[str, Any]:
        return dict(self.by_step.get(step, {}))

    def steps(self) -> list[str]:
        return sorted(self.by_step)

    def drop_steps(self, keep: Collection[str]) -> None:
        self.by_step = {k: v for k, v in self.by_step.items() if k in keep}

    def report_all(self, tasks: set[str], payload: dict[str, Any]) -> None:
        assert self.current is not None
        step = self.by_step.setdefault(self.current.step(), {})
        for task in tasks:
            step[task] = dict(payload)


class MemoryLog:
    def __init__(self, epoch: int = 4) -> None:
        self.records = [CommitRecord(epoch=epoch)]

    def committed(self) -> CommitRecord | None:
        return self.records[-1]

    def commit(self, record: CommitRecord) -> None:
        assert record.epoch > self.records[-1].epoch
        self.records.append(record)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def machine() -> tuple[NativeCoordinator, MemoryStore, MemoryLog, Clock]:
    store, log, clock = MemoryStore(), MemoryLog(), Clock()
    coordinator = NativeCoordinator(
        store=store,
        log=log,
        topology="wc",
        interval_s=1.0,
        timeout_s=10.0,
        clock=clock,
    )
    return coordinator, store, log, clock


Machine = tuple[NativeCoordinator, MemoryStore, MemoryLog, Clock]


def test_an_epoch_pauses_snapshots_commits_and_resumes(machine: Machine) -> None:
    coordinator, store, log, clock = machine
    assert coordinator.step().phase is Phase.RUNNING
    assert store.current == EpochControl(Phase.RUNNING, 4, 0, {}, store.current.stats)
    assert coordinator.step().phase is Phase.RUNNING  # interval not over
    clock.now += 1.0
    paused = coordinator.step()
    assert (paused.phase, paused.epoch, paused.generation) == (Phase.PAUSE, 5, 0)
    store.by_step[paused.step()] = {"lines/0": {"offset": 10}}
    assert coordinator.step().phase is Phase.PAUSE  # lines/1 still draining
    store.report_all({"lines/1"}, {"offset": 11})
    snapshot = coordinator.step()
    assert snapshot.phase is Phase.SNAPSHOT
    assert snapshot.offsets == {"lines/0": 10, "lines/1": 11}
    store.report_all({"wc/count/0"}, {})
    assert coordinator.step().phase is Phase.SNAPSHOT
    clock.now += 0.25
    store.report_all({"wc/count/1"}, {})
    running = coordinator.step()
    assert (running.phase, running.epoch) == (Phase.RUNNING, 5)
    record = log.records[-1]
    assert (record.epoch, dict(record.offsets)) == (5, {"lines/0": 10, "lines/1": 11})
    assert record.owners == ("wc/count/0", "wc/count/1")
    assert record.extra == {"mode": "native", "generation": 0, "pause_s": 0.25}
    assert running.stats["commits"] == 1
    assert running.stats["pause_max_s"] == 0.25
    clock.now += 1.0
    assert coordinator.step().epoch == 6  # epochs are never reused


def test_a_bumped_generation_rolls_back_without_committing(machine: Machine) -> None:
    coordinator, store, log, clock = machine
    coordinator.step()
    clock.now += 1.0
    coordinator.step()
    store.report_all(SPOUTS, {"offset": 3})
    assert coordinator.step().phase is Phase.SNAPSHOT
    store.bump_generation()  # a counter task restarted
    rollback = coordinator.step()
    assert (rollback.phase, rollback.epoch, rollback.generation) == (
        Phase.ROLLBACK,
        5,
        1,
    )
    assert store.by_step == {}  # the snapshot's reports are gone
    store.report_all({"lines/0"}, {})
    assert coordinator.step().phase is Phase.ROLLBACK
    store.report_all({"lines/1"}, {})
    assert coordinator.step().phase is Phase.RESTORE
    store.report_all(OWNERS, {})
    assert coordinator.step().phase is Phase.RESTORE  # stragglers may still come
    clock.now += 1.0
    running = coordinator.step()
    assert (running.phase, running.generation) == (Phase.RUNNING, 1)
    assert running.stats["rollbacks"] == 1
    assert [r.epoch for r in log.records] == [4]
    clock.now += 1.0
    assert coordinator.step().epoch == 6


def test_the_owners_restore_reports_outlive_the_restore_phase(
    machine: Machine,
) -> None:
    # A run report reads each owner's mechanism from them after RESTORE passed.
    coordinator, store, _log, clock = machine
    coordinator.step()
    store.bump_generation()
    coordinator.step()
    store.report_all(SPOUTS, {})
    restore = coordinator.step()
    assert restore.phase is Phase.RESTORE
    store.report_all(OWNERS, {"mechanism": "star", "dropped": 0})
    clock.now += 2.0
    assert coordinator.step().phase is Phase.RUNNING
    clock.now += 1.0
    assert coordinator.step().phase is Phase.PAUSE
    assert restore.step() in store.steps()
    assert {r["mechanism"] for r in store.reports(restore.step()).values()} == {"star"}
    store.bump_generation()
    assert coordinator.step().phase is Phase.ROLLBACK
    assert restore.step() in store.steps()
    store.report_all(SPOUTS, {})
    assert coordinator.step().phase is Phase.RESTORE  # the next restore drops them
    assert restore.step() not in store.steps()


def test_a_second_bump_restarts_the_rollback(machine: Machine) -> None:
    coordinator, store, _log, _clock = machine
    coordinator.step()
    store.bump_generation()
    assert coordinator.step().phase is Phase.ROLLBACK
    store.report_all(SPOUTS, {})
    assert coordinator.step().phase is Phase.RESTORE
    store.bump_generation()
    again = coordinator.step()
    assert (again.phase, again.generation) == (Phase.ROLLBACK, 2)


def test_spouts_resume_once_owners_dropped_no_straggler_for_the_quiet_time(
    machine: Machine,
) -> None:
    coordinator, store, _log, clock = machine
    coordinator.step()
    store.bump_generation()
    coordinator.step()
    store.report_all(SPOUTS, {})
    assert coordinator.step().phase is Phase.RESTORE
    store.report_all(OWNERS, {"dropped": 0})
    clock.now += 0.8
    assert coordinator.step().phase is Phase.RESTORE
    store.report_all({"wc/count/0"}, {"dropped": 3})  # a stalled task let go
    clock.now += 0.8
    assert coordinator.step().phase is Phase.RESTORE
    clock.now += 0.8
    assert coordinator.step().phase is Phase.RESTORE
    clock.now += 0.3
    assert coordinator.step().phase is Phase.RUNNING


def test_an_epoch_stuck_past_the_timeout_rolls_back(machine: Machine) -> None:
    coordinator, store, _log, clock = machine
    coordinator.step()
    clock.now += 1.0
    coordinator.step()
    clock.now += 10.0
    coordinator.step()
    assert store.gen == 1
    assert coordinator.step().phase is Phase.ROLLBACK


def running(generation: int) -> EpochControl:
    return EpochControl(Phase.RUNNING, 3, generation)


def test_a_failed_tree_asks_for_one_rollback_of_its_generation() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    agent.on_control(running(2))
    agent.follow(2)
    ids = [agent.track(None, offset) for offset in (0, 2, 4, 6)]
    assert agent.pending == 4
    agent.acked(ids[0])
    assert agent.take_rollback() == (False, None)
    agent.failed(ids[3])
    agent.failed(ids[1])  # the same rollback replays it
    assert agent.pending == 1
    assert agent.requested
    assert agent.take_rollback() == (True, 2)
    agent.failed(ids[2])
    assert agent.take_rollback() == (False, None)
    agent.reset()  # the rollback ended: the spout was sought
    assert not agent.requested
    agent.on_control(running(3))
    agent.follow(3)
    agent.failed(agent.track(None, 8))
    assert agent.take_rollback() == (True, 3)


def test_a_tree_failing_while_a_rollback_runs_asks_for_nothing() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    agent.on_control(running(2))
    agent.follow(2)
    seq = agent.track("mine", 4)
    # another task restarted: the coordinator already rolls generation 3 back
    agent.on_control(EpochControl(Phase.ROLLBACK, 3, 3))
    assert agent.failed(seq) == "mine"
    assert agent.take_rollback() == (False, None)


def test_trees_emitted_before_the_first_running_join_it() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    seq = agent.track(None, 0)
    agent.on_control(running(0))
    agent.follow(0)
    agent.failed(seq)
    assert agent.take_rollback() == (True, 0)


def test_a_poison_tree_is_skipped_after_its_rollbacks() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    for generation in range(MAX_REPLAYS + 1):
        agent.on_control(running(generation))
        agent.follow(generation)
        assert not agent.skips(8)
        agent.failed(agent.track("poison", 8))
        # every failure, the last included, rolls back its partial effects
        assert agent.take_rollback() == (True, generation)
        agent.reset()
    assert agent.skips(8)
    assert not agent.skips(10)
    assert not agent.skips(None)


def test_spout_hands_user_ids_back() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    seq = agent.track("mine", 0)
    assert agent.acked(seq) == "mine"
    assert agent.report_once("pause-0-5")
    assert not agent.report_once("pause-0-5")


def test_a_restarted_owner_snapshots_only_after_its_restore() -> None:
    agent = BoltAgent(bumped=True)
    agent.min_generation = 3
    assert agent.action(EpochControl(Phase.SNAPSHOT, 7, 2)) is None
    assert agent.action(EpochControl(Phase.SNAPSHOT, 7, 3)) is None
    restore = EpochControl(Phase.RESTORE, 7, 3)
    assert agent.action(restore) == BoltAgent.RESTORE
    agent.done(restore, BoltAgent.RESTORE)
    assert agent.action(restore) is None
    assert agent.awaiting == 3
    assert not agent.resumed(EpochControl(Phase.RESTORE, 7, 3))
    assert agent.resumed(EpochControl(Phase.RUNNING, 7, 3))
    snapshot = EpochControl(Phase.SNAPSHOT, 8, 3)
    assert agent.action(snapshot) == BoltAgent.SNAPSHOT
    agent.done(snapshot, BoltAgent.SNAPSHOT)
    assert agent.action(snapshot) is None


def test_a_first_start_owner_adopts_the_generation_it_sees() -> None:
    agent = BoltAgent(bumped=False)
    assert agent.action(EpochControl(Phase.SNAPSHOT, 5, 2)) == BoltAgent.SNAPSHOT
    assert agent.action(EpochControl(Phase.SNAPSHOT, 5, 3)) is None


def test_checkpoint_mode_is_local_or_native() -> None:
    assert checkpoint_mode({}) == "local"
    assert checkpoint_mode({"sr3.checkpoint.mode": "native"}) == "native"
    with pytest.raises(ConfigError, match="sr3.checkpoint.mode"):
        checkpoint_mode({"sr3.checkpoint.mode": "trident"})


def test_native_stateful_specs_get_a_tick_unless_set() -> None:
    import json  # noqa: PLC0415

    from storm_bridge import StatefulBolt  # noqa: PLC0415

    class Counter(StatefulBolt):
        outputs = ["word"]

    native = {"sr3.checkpoint.mode": "native"}
    assert json.loads(Counter.spec(config=native).config) == {
        **native,
        "topology.tick.tuple.freq.secs": 1,
    }
    own = {**native, "topology.tick.tuple.freq.secs": 5}
    assert json.loads(Counter.spec(config=own).config) == own
    assert json.loads(Counter.spec(config={"a": 1}).config) == {"a": 1}


def test_native_mode_without_the_ring_is_refused_naming_the_key() -> None:
    require_ring(None, {"sr3.checkpoint.mode": "local"}, "wc/count/0")  # in memory
    require_ring(object(), {"sr3.checkpoint.mode": "native"}, "wc/count/0")
    with pytest.raises(ConfigError, match=r"wc/count/0: .*set sr3\.zk\.hosts"):
        require_ring(None, {"sr3.checkpoint.mode": "native"}, "wc/count/0")
