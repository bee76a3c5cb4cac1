"""A key-groups hand-over switches a batch before its epoch commits, and safely.

The batch's key groups switch once its senders' snapshots of the epoch are
durable and its receivers captured theirs, without waiting for every other
task and the commit; until the commit, that commit records the tables from
before the switch, and a rollback restores them. The engine here is a stand-in
for the hand-over's own collaborators (tables, task channels, flow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sr3.keygroups import decode_table, encode_table, range_table
from storm_bridge.cluster.keygroup_rebalance import KeyGroupHandOver
from storm_bridge.cluster.rebalance_state import Phase, Rebalance
from topology_api.barriers import KEY_GROUP_STREAM

G = 8
NAME = "count"
#: the first two tasks' ids; the rebalance adds 12 and 13
OLD = (10, 11)


@dataclass
class Channel:
    """A task's channel: what the hand-over sent it."""

    commands: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def send(self, message: dict[str, Any]) -> None:
        assert message["stream"] == KEY_GROUP_STREAM
        action, info = message["tuple"]
        self.commands.append((action, info))


class Engine:
    """What a hand-over reads and drives of the engine."""

    def __init__(self) -> None:
        self.tasks: dict[int, Any] = {}
        self.task_to_component: dict[int, str] = {}
        self.ids = list(OLD)
        for task_id in OLD:
            self._add(task_id)
        table = range_table(len(OLD), G)
        self.router = SimpleNamespace(
            key_groups={NAME: table},
            component_tasks=lambda name: list(self.ids) if name == NAME else [],
            # the tuple's first value is its key group
            key_group=lambda _source_task, _stream, values, _name: values[0],
            reroute=lambda _source_task, _stream, values, name: [
                self.ids[table[values[0]]]
            ],
        )
        self.delivered: list[tuple[int, list[Any]]] = []
        self.flow = SimpleNamespace(
            deliver=lambda target, _src, _task, _stream, values, _anchors: (
                self.delivered.append((target, values))
            ),
            deliver_now=lambda *args: self.delivered.append((args[0], args[4])),
        )
        self.coordinator = SimpleNamespace(next_epoch=2)

    def _add(self, task_id: int) -> None:
        self.tasks[task_id] = SimpleNamespace(
            task_id=task_id,
            component=SimpleNamespace(name=NAME),
            is_spout=False,
            processed=0,
            conf={},
            process=Channel(),
        )
        self.task_to_component[task_id] = NAME

    def grow(self, _name: str, count: int) -> list[int]:
        new = [max(self.ids) + 1 + i for i in range(count)]
        for task_id in new:
            self._add(task_id)
        self.ids += new
        return new

    def commands(self, task_id: int) -> list[str]:
        return [action for action, _info in self.tasks[task_id].process.commands]


def moving_at_epoch_2(batch: int = G) -> tuple[Engine, KeyGroupHandOver]:
    """count 2 -> 4: new tasks run, epoch 2's barrier reached the first senders."""
    engine = Engine()
    rebalance = Rebalance("r1", {NAME: (2, 4)}, requested_at=0.0)
    hand = KeyGroupHandOver(
        cast(Any, engine),
        rebalance,
        batch_size=batch,
        clock=lambda: 0.0,
        grow=engine.grow,
        retire=lambda _name, _n: None,
    )
    hand.committed_epoch(1)  # new tasks start
    for task_id in (12, 13):
        hand.restored(engine.tasks[task_id])
    engine.coordinator.next_epoch = 3  # epoch 2 is open
    for task_id in OLD:
        hand.barrier_sent(engine.tasks[task_id], 2)
    assert rebalance.phase is Phase.HOLDING
    # a tuple of epoch 3 for key group 2 (moving from task 10 to 12) is held,
    # one for key group 0 (staying) is not
    assert hand.intercept((10, "lines", 1, "default", [2, "w"], []))
    assert not hand.intercept((10, "lines", 1, "default", [0, "v"], []))
    return engine, hand


def phase(hand: KeyGroupHandOver) -> Phase:
    return hand.rebalance.phase


def before() -> list[int]:
    return range_table(2, G)


def test_the_batch_switches_once_senders_wrote_and_receivers_captured() -> None:
    engine, hand = moving_at_epoch_2()
    for task_id in (12, 13):
        hand.captured(engine.tasks[task_id], 2)
    hand.written(engine.tasks[10], 2)
    assert "install" not in engine.commands(12)  # task 11 still writes its snapshot
    hand.written(engine.tasks[11], 2)
    # switched before epoch 2 commits: installs, drops, the held tuple rerouted
    assert "install" in engine.commands(12)
    assert "install" in engine.commands(13)
    assert "drop" in engine.commands(10)
    assert "drop" in engine.commands(11)
    assert engine.delivered == [(12, [2, "w"])]
    assert engine.router.key_groups[NAME] != before()
    assert hand.rebalance.phase is Phase.ARMED
    # epoch 2's commit records the tables the snapshots of epoch 2 were taken by
    now = {NAME: encode_table(engine.router.key_groups[NAME])}
    recorded = hand.recorded_tables(now)
    assert decode_table(recorded[NAME], G) == before()
    hand.committed_epoch(2)
    assert hand.committed[NAME] == before()
    # epoch 3's commit records the switched tables
    assert hand.recorded_tables(now) == now


def test_a_receiver_not_yet_past_the_barrier_holds_the_switch_back() -> None:
    engine, hand = moving_at_epoch_2()
    hand.written(engine.tasks[10], 2)
    hand.written(engine.tasks[11], 2)
    hand.captured(engine.tasks[12], 2)
    # its capture of epoch 2 is owed; it read ahead and postponed compaction
    assert engine.commands(13) == ["prefetch", "postpone"]
    assert engine.delivered == []
    hand.written(engine.tasks[13], 2)  # a write report implies the capture
    assert engine.commands(13)[-1] == "install"


@pytest.mark.parametrize("undo", ["rollback", "abandon"])
def test_a_switch_before_the_commit_is_undone_by_a_rollback_kept_by_an_abandon(
    undo: str,
) -> None:
    engine, hand = moving_at_epoch_2()
    for task_id in (12, 13):
        hand.captured(engine.tasks[task_id], 2)
    for task_id in OLD:
        hand.written(engine.tasks[task_id], 2)
    switched = list(engine.router.key_groups[NAME])
    if undo == "rollback":
        # to epoch 1: its tables, which the restored snapshots hold
        hand.rolled_back()
        assert engine.router.key_groups[NAME] == before()
    else:
        # the receivers' next snapshots write the batch whole: the next commit
        # records the switched tables
        hand.dropped(2)
        assert engine.router.key_groups[NAME] == switched
    now = {NAME: encode_table(engine.router.key_groups[NAME])}
    assert hand.recorded_tables(now) == now


def test_the_next_batch_waits_for_the_epoch_that_writes_this_one_whole() -> None:
    # two batches: key groups 2 and 6 first, then 3 and 7
    engine, hand = moving_at_epoch_2(batch=2)
    for task_id in (12, 13):
        hand.captured(engine.tasks[task_id], 2)
    for task_id in OLD:
        hand.written(engine.tasks[task_id], 2)
    hand.committed_epoch(2)
    # the receivers' snapshots of epoch 3 hold key groups 2 and 6 whole: the
    # second batch does not hold there, but at epoch 4
    engine.coordinator.next_epoch = 4
    hand.barrier_sent(engine.tasks[10], 3)
    assert phase(hand) is Phase.ARMED
    assert not hand.intercept((10, "lines", 1, "default", [3, "w"], []))
    hand.committed_epoch(3)
    engine.coordinator.next_epoch = 5
    hand.barrier_sent(engine.tasks[10], 4)
    assert phase(hand) is Phase.HOLDING
    assert hand.intercept((10, "lines", 1, "default", [3, "w"], []))
