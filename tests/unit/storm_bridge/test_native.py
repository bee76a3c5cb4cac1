"""The native checkpoint protocol's state machine, against an in-memory store."""

from __future__ import annotations

from typing import Any

import pytest

from sr3.errors import ConfigError
from storm_bridge.native import (
    MAX_REPLAYS,
    OWNER,
    SPOUT,
    BoltAgent,
    NativeCoordinator,
    SpoutAgent,
    checkpoint_mode,
)
from zk.checkpoints import CommitRecord
from zk.epochs import EpochControl, Phase

SPOUTS = {"lines/0", "lines/1"}
OWNERS = {"wc/count/0", "wc/count/1"}


class MemoryStore:
    """The records of :mod:`zk.epochs`, in memory."""

    def __init__(self) -> None:
        self.current: EpochControl | None = None
        self.gen = 0
        self.tasks: dict[str, set[str]] = {SPOUT: set(SPOUTS), OWNER: set(OWNERS)}
        self.steps: dict[str, dict[str, Any]] = {}

    def control(self, *, fresh: bool = False) -> EpochControl | None:
        return self.current

    def set_control(self, control: EpochControl) -> None:
        self.current = control

    def generation(self) -> int:
        return self.gen

    def bump_generation(self) -> int:
        self.gen += 1
        return self.gen

    def registered(self, kind: str) -> set[str]:
        return set(self.tasks[kind])

    def reports(self, step: str) -> dict[str, Any]:
        return dict(self.steps.get(step, {}))

    def drop_steps(self, keep: str) -> None:
        self.steps = {k: v for k, v in self.steps.items() if k == keep}

    def report_all(self, tasks: set[str], payload: dict[str, Any]) -> None:
        assert self.current is not None
        step = self.steps.setdefault(self.current.step(), {})
        for task in tasks:
            step[task] = dict(payload)


class MemoryLog:
    def __init__(self, epoch: int = 4) -> None:
        self.records = [CommitRecord(epoch=epoch)]

    def committed(self, topology: str) -> CommitRecord | None:
        return self.records[-1]

    def commit(self, topology: str, record: CommitRecord) -> None:
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
    store.steps[paused.step()] = {"lines/0": {"offset": 10}}
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
    assert store.steps == {}  # the snapshot's reports are gone
    store.report_all({"lines/0"}, {})
    assert coordinator.step().phase is Phase.ROLLBACK
    store.report_all({"lines/1"}, {})
    assert coordinator.step().phase is Phase.RESTORE
    store.report_all(OWNERS, {})
    running = coordinator.step()
    assert (running.phase, running.generation) == (Phase.RUNNING, 1)
    assert running.stats["rollbacks"] == 1
    assert [r.epoch for r in log.records] == [4]
    clock.now += 1.0
    assert coordinator.step().epoch == 6


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


def test_an_epoch_stuck_past_the_timeout_rolls_back(machine: Machine) -> None:
    coordinator, store, _log, clock = machine
    coordinator.step()
    clock.now += 1.0
    coordinator.step()
    clock.now += 10.0
    coordinator.step()
    assert store.gen == 1
    assert coordinator.step().phase is Phase.ROLLBACK


def test_spout_replays_from_before_its_earliest_failed_tree() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    ids = [agent.track(prev, None) for prev in (None, 0, 2, 4)]
    assert agent.pending == 4
    agent.acked(ids[0])
    agent.failed(ids[3])
    agent.failed(ids[1])
    assert agent.pending == 1
    assert agent.resume_offset(6) == 0
    assert agent.take_replay() == (True, 0)
    assert agent.take_replay() == (False, None)
    assert agent.resume_offset(6) == 6
    assert agent.acked("unknown") is None


def test_a_poison_tree_is_dropped_after_its_replays() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    for _ in range(MAX_REPLAYS):
        agent.failed(agent.track(6, "poison", 8))
        assert agent.take_replay() == (True, 6)
    agent.failed(agent.track(6, "poison", 8))
    assert agent.take_replay() == (False, None)


def test_spout_hands_user_ids_back() -> None:
    agent = SpoutAgent(name="lines/0", bumped=False)
    seq = agent.track(None, "mine")
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
