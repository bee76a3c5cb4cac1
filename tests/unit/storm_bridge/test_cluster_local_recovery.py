"""Task-scope recovery on fake tasks: the decision, logging, feeding, dedupe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.context import assign_task_ids
from storm_bridge.cluster.events import Journal
from storm_bridge.cluster.local_recovery import LocalRecovery
from storm_bridge.cluster.scopes import RecoveryScope
from storm_bridge.cluster.settings import TaskSettings, topology_conf
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.messages import ShellMsg, bolt_tuple_msg
from topology_api.topology import load_topology

BODY = """
from streamparse import Bolt, Grouping, Topology
from storm_bridge import ReplayableSpout, StatefulBolt
from streamparse import Spout


class Src(ReplayableSpout):
    outputs = ["word"]


class Plain(Spout):
    outputs = ["word"]


class Count(StatefulBolt):
    outputs = ["word", "n"]


class Shaky(Bolt):
    outputs = ["word"]
    sr3_nondeterministic = True


class Topo(Topology):
    src = Src.spec()
    plain = Plain.spec()
    count = Count.spec(inputs={{src: Grouping.fields("word")}}, par=2)
    shaky = Shaky.spec(inputs={{plain: Grouping.SHUFFLE}})
"""


class FakeProcess:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.outbox_size = 0

    def send(self, message: Any, urgent: bool = False) -> None:
        self.sent.append(message)


class Hooks:
    def __init__(self) -> None:
        self.rollbacks: list[str] = []

    def commit(self, epoch: int, offsets: Any, owners: list[str]) -> None:
        """Commits always succeed."""


def _world(write_topology: Callable[..., Path], scope: RecoveryScope) -> Any:
    topology = load_topology(write_topology(body=BODY))
    task_to_component = assign_task_ids(topology, 0)
    settings = TaskSettings.from_conf(topology_conf(topology.name, {}, {}))
    conf = {"sr3.zk.hosts": "127.0.0.1:1"}
    tasks = {
        t: TaskRuntime(
            t, topology.components[c], dict(conf), settings, TaskState.RUNNING
        )
        for t, c in task_to_component.items()
    }
    for rt in tasks.values():
        rt.process = FakeProcess()  # type: ignore[assignment]
    by_component: dict[str, list[TaskRuntime]] = {}
    for t in sorted(tasks):
        by_component.setdefault(tasks[t].component.name, []).append(tasks[t])
    recycled: list[int] = []

    def recycle(rt: TaskRuntime) -> None:
        recycled.append(rt.task_id)

    component_tasks = lambda name: [rt.task_id for rt in by_component[name]]  # noqa: E731
    timers = TimerQueue()
    coordinator = Coordinator(
        topology=topology,
        tasks=tasks,
        component_tasks=component_tasks,
        settings=CheckpointSettings(Hooks(), interval_s=1.0, first_epoch=1),
        timers=timers,
        clock=lambda: 0.0,
        queue_spout_command=lambda rt, c, e: None,
        deliver=lambda *args: None,
        recycle=recycle,
    )
    local = LocalRecovery(
        scope=scope,
        buffer_bytes=1 << 20,
        tasks=tasks,
        component_tasks=component_tasks,
        coordinator=coordinator,
        journal=Journal(topology.components, lambda: 0.0, 100),
        timers=timers,
        clock=lambda: 0.0,
        replay_timeout_s=60.0,
    )
    return local, by_component, coordinator, recycled


@pytest.fixture
def world(write_topology: Callable[..., Path]) -> Any:
    return _world(write_topology, RecoveryScope.TASK)


def _deliver(local: LocalRecovery, rt: TaskRuntime, n: int) -> str:
    tuple_id = f"t{n}"
    pending = PendingInput({}, "src", "default", [f"w{n}"])
    message = bolt_tuple_msg(tuple_id, "src", "default", 1, [f"w{n}"])
    if not local.intercept(rt, tuple_id, message, pending):
        rt.inputs[tuple_id] = pending
        rt.process.send(message)  # type: ignore[union-attr]
        local.delivered(rt, tuple_id, message)
    return tuple_id


def _emit(values: list[Any], anchors: list[str] | None = None) -> ShellMsg:
    return ShellMsg(
        command="emit", stream="default", values=values, anchors=anchors or []
    )


def test_the_decision_names_why_a_failure_rolls_back_globally(
    world: Any, write_topology: Callable[..., Path]
) -> None:
    local, tasks, _, _ = world
    assert local.decide(tasks["count"][0]).scope is RecoveryScope.TASK
    assert local.decide(tasks["src"][0]).scope is RecoveryScope.TASK
    plain = local.decide(tasks["plain"][0])
    assert plain.scope is RecoveryScope.GLOBAL
    assert "plain spout" in plain.reason
    shaky = local.decide(tasks["shaky"][0])
    assert shaky.scope is RecoveryScope.GLOBAL
    assert "sr3_nondeterministic" in shaky.reason
    local.vetoes.append(lambda rt: "a rebalance moves it")
    assert local.decide(tasks["count"][0]).reason == "a rebalance moves it"
    memory_only = tasks["count"][1]
    memory_only.conf.pop("sr3.zk.hosts")
    local.vetoes.clear()
    assert "memory only" in local.decide(memory_only).reason
    glob, gtasks, _, _ = _world(write_topology, RecoveryScope.GLOBAL)
    assert glob.decide(gtasks["count"][0]).reason == "sr3.recovery.scope is global"


def test_a_ring_node_leaving_abandons_the_open_epoch_only_under_task_scope(
    world: Any, write_topology: Callable[..., Path]
) -> None:
    local, _, coordinator, recycled = world
    assert coordinator.open_epoch()
    epoch = coordinator.in_flight
    decision = local.ring_node_left("node-2")
    assert decision.scope is RecoveryScope.TASK
    # nothing restarts, nothing rolls back; the open epoch is given up
    assert coordinator.in_flight is None
    assert coordinator.recoveries == []
    assert recycled == []
    assert local.report()["ring_nodes_left"] == [
        {"node": "node-2", "at_s": 0.0, "abandoned_epoch": epoch}
    ]
    glob, _, _, _ = _world(write_topology, RecoveryScope.GLOBAL)
    decision = glob.ring_node_left("node-2")
    assert decision.scope is RecoveryScope.GLOBAL
    assert glob.report()["ring_nodes_left"] == []


def test_a_failed_task_is_fed_its_log_again_and_its_re_emits_are_dropped(
    world: Any,
) -> None:
    local, tasks, coordinator, recycled = world
    count, other = tasks["count"]
    first = _deliver(local, count, 1)
    local.forwarded(count, _emit(["w1", 1]), None)
    del count.inputs[first]  # acked before the crash
    second = _deliver(local, count, 2)  # pending at the crash

    assert local.dropping(count)  # its pending input's tree stays alive
    assert count.inputs == {}
    assert local.task_died(count).scope is RecoveryScope.TASK
    assert coordinator.recoveries[-1].scope == "task"
    count.process = FakeProcess()  # type: ignore[assignment]
    third = _deliver(local, count, 3)  # while it restores: logged, not sent
    assert count.process.sent == []  # type: ignore[union-attr]
    assert local.holding()  # no epoch opens meanwhile

    local.restored(count, {"owner": "t/count/0", "epoch": None})
    sent = [m["id"] for m in count.process.sent]  # type: ignore[union-attr]
    assert sent == [first, second, third]  # in the logged order
    assert set(count.inputs) == {second, third}
    # the re-emit of w1 was forwarded before the crash: dropped
    assert local.emit(count, _emit(["w1", 1]), None)
    assert local.settled(count, first)  # acked by the previous incarnation
    assert not local.settled(count, second)
    del count.inputs[second]
    assert not local.emit(count, _emit(["w2", 1]), None)  # new: goes out
    local.forwarded(count, _emit(["w2", 1]), None)
    assert not local.settled(count, third)
    del count.inputs[third]
    assert not local.holding()  # caught up
    assert recycled == []  # nothing else restarted
    assert other.process.sent == []  # type: ignore[union-attr]
    assert coordinator.recoveries[-1].caught_up_at is not None


def test_a_re_emit_that_differs_falls_back_to_a_global_rollback(world: Any) -> None:
    local, tasks, coordinator, recycled = world
    count = tasks["count"][0]
    _deliver(local, count, 1)
    local.forwarded(count, _emit(["w1", 1]), None)
    local.dropping(count)
    local.task_died(count)
    local.restored(count, {"owner": "t/count/0"})
    assert local.emit(count, _emit(["w1", 99]), None)
    last = coordinator.recoveries[-1]
    assert last.scope == "global"
    assert "nondeterministic" in last.reason
    assert count.task_id in recycled


def test_a_second_failure_during_the_replay_joins_the_recovery(world: Any) -> None:
    local, tasks, coordinator, _ = world
    count = tasks["count"][0]
    one = _deliver(local, count, 1)
    local.forwarded(count, _emit(["w1", 1]), None)
    local.dropping(count)
    local.task_died(count)
    local.restored(count, {"owner": "t/count/0"})
    assert local.emit(count, _emit(["w1", 1]), None)
    local.dropping(count)  # dies again before acking
    local.task_died(count)
    assert len(coordinator.recoveries) == 1
    assert coordinator.recoveries[0].cause == "count:0, count:0"
    count.process = FakeProcess()  # type: ignore[assignment]
    local.restored(count, {"owner": "t/count/0"})
    assert [m["id"] for m in count.process.sent] == [one]  # type: ignore[union-attr]
    assert local.emit(count, _emit(["w1", 1]), None)  # matched from 0 again


def _over_the_bound(local: Any, count: Any, first: int) -> None:
    """Deliver three tuples to ``count`` past a 300-byte log bound."""
    local.buffer_bytes = 300
    for n in range(first, first + 3):
        _deliver(local, count, n)
    assert local.over_budget()


def test_a_commit_trims_the_logs_and_a_full_log_backpressures(world: Any) -> None:
    local, tasks, coordinator, _ = world
    count = tasks["count"][0]
    _over_the_bound(local, count, 0)
    assert local.over_budget_hits > 0
    local.logs[count.task_id].output_cut(4)
    local.committed(4)
    assert not local.over_budget()
    assert local.report()["bytes"]["count:0"] == 0
    assert local.report()["peak_bytes"]["count:0"] > 300


def test_a_global_rollback_or_a_rebalance_lifts_the_backpressure_of_logs_it_empties(
    world: Any,
) -> None:
    local, tasks, _coordinator, _ = world
    count = tasks["count"][0]
    _over_the_bound(local, count, 0)
    local.reset()  # a global rollback: every log starts again, empty
    assert not local.over_budget()
    _over_the_bound(local, count, 3)
    local.retask([count.task_id])  # a rebalance switched the task: an empty log
    assert not local.over_budget()
