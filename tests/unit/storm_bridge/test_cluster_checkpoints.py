"""The checkpoint coordinator on fake tasks: alignment, forwarding, commit, rollback."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sr3.errors import ConfigError
from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.checkpoints import BARRIER_SOURCE, Coordinator
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.context import assign_task_ids
from storm_bridge.cluster.settings import TaskSettings, topology_conf
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import BARRIER_COMMAND, BARRIER_STREAM
from topology_api.topology import load_topology

BODY = """
from streamparse import Bolt, Grouping, Topology
from storm_bridge import ReplayableSpout, StatefulBolt


class Src(ReplayableSpout):
    outputs = ["word"]


class Mid(Bolt):
    outputs = ["word"]


class Count(StatefulBolt):
    outputs = ["word", "n"]


class Topo(Topology):
    src = Src.spec(par=2)
    mid = Mid.spec(inputs={{src: Grouping.SHUFFLE}})
    count = Count.spec(inputs={{mid: Grouping.fields("word")}})
"""


class FakeProcess:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.outbox_size = 0

    def send(self, message: Any, urgent: bool = False) -> None:
        self.sent.append(message)


class Recorder:
    def __init__(self) -> None:
        self.commits: list[tuple[int, dict[str, Any], list[str]]] = []
        self.queued: list[tuple[int, str, Any]] = []
        self.delivered: list[tuple[Any, ...]] = []
        self.recycled: list[int] = []

    def commit(self, epoch: int, offsets: Mapping[str, Any], owners: list[str]) -> None:
        self.commits.append((epoch, dict(offsets), list(owners)))


@pytest.fixture
def world(
    write_topology: Callable[..., Path],
) -> tuple[Coordinator, dict[str, list[TaskRuntime]], Recorder]:
    topology = load_topology(write_topology(body=BODY))
    task_to_component = assign_task_ids(topology, 0)
    settings = TaskSettings.from_conf(topology_conf(topology.name, {}, {}))
    tasks = {
        t: TaskRuntime(t, topology.components[c], {}, settings, TaskState.RUNNING)
        for t, c in task_to_component.items()
    }
    for rt in tasks.values():
        rt.process = FakeProcess()  # type: ignore[assignment]
    by_component: dict[str, list[TaskRuntime]] = {}
    for t in sorted(tasks):
        by_component.setdefault(tasks[t].component.name, []).append(tasks[t])
    rec = Recorder()

    def recycle(rt: TaskRuntime) -> None:
        rec.recycled.append(rt.task_id)
        rt.state = TaskState.RESTARTING

    coordinator = Coordinator(
        topology=topology,
        tasks=tasks,
        component_tasks=lambda name: [rt.task_id for rt in by_component[name]],
        settings=CheckpointSettings(rec, interval_s=1.0, first_epoch=5),
        timers=TimerQueue(),
        clock=lambda: 0.0,
        queue_spout_command=lambda rt, c, e: rec.queued.append((rt.task_id, c, e)),
        deliver=lambda *args: rec.delivered.append(args),
        recycle=recycle,
    )
    return coordinator, by_component, rec


def test_barriers_align_forward_and_commit(world: Any) -> None:
    coordinator, tasks, rec = world
    (src0, src1), (mid,), (count,) = tasks["src"], tasks["mid"], tasks["count"]
    assert coordinator.open_epoch()
    assert rec.queued == [
        (src0.task_id, BARRIER_COMMAND, 5),
        (src1.task_id, BARRIER_COMMAND, 5),
    ]
    mid.inputs["t1"] = PendingInput({}, "src", "default", ["a"])

    coordinator.spout_barrier(src0, [5, {"offset": 4}])
    held = (mid.task_id, "src", src0.task_id, "default", ["b"], {})
    assert coordinator.hold(mid.task_id, src0.task_id, held)  # past its barrier
    assert not coordinator.hold(mid.task_id, src1.task_id, held)
    assert coordinator.busy()

    coordinator.spout_barrier(src1, [5, {"offset": 7}])
    assert count.process.sent == []  # mid still owes its output for t1
    # ...so tuples after the barrier wait too: a bolt that combines inputs (a
    # BatchingBolt) must not mix them into the output it owes for the epoch
    assert rec.delivered == []
    later = (mid.task_id, "src", src1.task_id, "default", ["c"], {})
    assert coordinator.hold(mid.task_id, src1.task_id, later)

    del mid.inputs["t1"]
    coordinator.input_done(mid)
    assert rec.delivered == [held, later]  # released once the barrier moved on
    assert not coordinator.hold(mid.task_id, src0.task_id, held)
    (barrier,) = count.process.sent
    assert barrier["comp"] == BARRIER_SOURCE
    assert barrier["stream"] == BARRIER_STREAM
    assert barrier["tuple"] == [5, {"offsets": {"src/0": 4, "src/1": 7}}]
    assert rec.commits == []

    coordinator.bolt_barrier(count, [5, {"owner": "x"}])
    assert rec.commits == []  # forwarded, not yet durable
    coordinator.snapshot_written(count, {"epoch": 4, "owner": "x"})  # stale
    assert rec.commits == []
    coordinator.snapshot_written(count, {"epoch": 5, "owner": "x"})
    owner = f"{count.component.name}/0"
    assert rec.commits == [
        (5, {"src/0": 4, "src/1": 7}, [f"{coordinator._topology.name}/{owner}"])
    ]
    assert coordinator.last_committed == 5
    assert coordinator.in_flight is None
    assert not coordinator.busy()


def test_a_death_rolls_back_and_waits_for_restores(world: Any) -> None:
    coordinator, tasks, rec = world
    (src0, _src1), (mid,), (count,) = tasks["src"], tasks["mid"], tasks["count"]
    assert coordinator.open_epoch()
    coordinator.spout_barrier(src0, [5, {"offset": 1}])
    mid.state = TaskState.RESTARTING  # mid died
    coordinator.task_died(mid)
    assert sorted(rec.recycled) == sorted(rt.task_id for rt in (*tasks["src"], count))
    assert coordinator.in_flight is None
    assert not coordinator.busy()
    for rts in tasks.values():
        for rt in rts:
            rt.state = TaskState.RUNNING
    assert not coordinator.open_epoch()  # the stateful task has not restored yet
    coordinator.restored(count, {"used": "tree", "bytes": 10})
    assert coordinator.recoveries[-1].restores == {
        f"{coordinator._topology.name}/count/0": {"used": "tree", "bytes": 10}
    }
    assert coordinator.open_epoch()
    assert coordinator.in_flight == 6  # epochs never repeat after a rollback


def test_one_commit_resumes_every_rollback_before_it(world: Any) -> None:
    # a task dies, then a ring node, before any epoch commits: `--until-idle`
    # waits for every recovery to resume, so the first must not stay open
    coordinator, tasks, _rec = world
    (src0, src1), (mid,), (count,) = tasks["src"], tasks["mid"], tasks["count"]

    def restart_all() -> None:
        for rts in tasks.values():
            for rt in rts:
                rt.state = TaskState.RUNNING
        coordinator.restored(count, {"used": "star", "bytes": 1})

    coordinator.task_died(mid)
    restart_all()  # restored, but no epoch committed yet
    coordinator.rollback("ring node n2")
    restart_all()
    assert [r.resumed_at for r in coordinator.recoveries] == [None, None]
    assert coordinator.open_epoch()
    epoch = coordinator.in_flight
    coordinator.spout_barrier(src0, [epoch, {"offset": 1}])
    coordinator.spout_barrier(src1, [epoch, {"offset": 2}])
    coordinator.input_done(mid)
    coordinator.bolt_barrier(count, [epoch, {"owner": "x"}])
    coordinator.snapshot_written(count, {"epoch": epoch, "owner": "x"})
    assert coordinator.last_committed == epoch
    assert all(r.resumed_at is not None for r in coordinator.recoveries)
    assert len(coordinator.recoveries) == 2


def test_a_stuck_epoch_is_abandoned_and_held_tuples_released(world: Any) -> None:
    coordinator, tasks, rec = world
    (src0, _src1), (mid,) = tasks["src"], tasks["mid"]
    assert coordinator.open_epoch()
    coordinator.spout_barrier(src0, [5, {"offset": 1}])
    held = (mid.task_id, "src", src0.task_id, "default", ["b"], {})
    assert coordinator.hold(mid.task_id, src0.task_id, held)
    for callback in coordinator._timers.pop_due(1e9):  # past sr3.checkpoint.timeout.s
        callback()
    assert coordinator.abandoned == 1
    assert coordinator.in_flight is None
    assert rec.delivered == [held]
    assert not coordinator.hold(mid.task_id, src0.task_id, held)
    assert rec.commits == []
    assert coordinator.open_epoch()
    assert coordinator.in_flight == 6


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.checkpoint\.interval\.s"):
        CheckpointSettings(Recorder(), interval_s=0)
    with pytest.raises(ConfigError, match="epochs start at 1"):
        CheckpointSettings(Recorder(), first_epoch=0)
