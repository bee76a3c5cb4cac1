"""Which task is a straggler, and what a duplicate is fed (pure, no subprocesses)."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import pytest

from sr3.errors import ConfigError
from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.duplicates import Stragglers
from storm_bridge.cluster.events import Journal
from storm_bridge.cluster.races import InputLog, Race, RaceCopy
from storm_bridge.cluster.settings import TaskSettings
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime, TimerQueue
from storm_bridge.messages import ShellMsg, parse_shell_msg
from storm_bridge.straggler import (
    StragglerPolicy,
    StragglerSettings,
    TaskSample,
    verdict,
)
from topology_api.component_specs import ComponentInfo

SETTINGS = StragglerSettings(
    StragglerPolicy.DUPLICATE, lag_s=5.0, rate_ratio=0.2, queue_min=100
)


def sample(silent_s: float = 0.1, queue: int = 0, rate: float = 0.0) -> TaskSample:
    return TaskSample(task_id=1, silent_s=silent_s, queue=queue, rate=rate)


def test_a_silent_task_is_a_straggler_even_alone() -> None:
    reason = verdict(sample(silent_s=6.0), [], SETTINGS, [sample(), sample()])
    assert reason is not None
    assert "sr3.straggler.lag.s=5" in reason


def test_silence_shared_with_the_peers_is_an_overloaded_machine() -> None:
    quiet = [sample(silent_s=5.5), sample(silent_s=7.0)]
    assert verdict(sample(silent_s=6.0), quiet, SETTINGS) is None
    # a task alone is compared with the rest of the topology
    assert verdict(sample(silent_s=6.0), [], SETTINGS, quiet) is None


def test_a_busy_task_keeping_pace_with_its_peers_is_not() -> None:
    peers = [sample(queue=400, rate=1000.0), sample(queue=500, rate=900.0)]
    assert verdict(sample(queue=450, rate=950.0), peers, SETTINGS) is None


def test_a_task_with_a_queue_and_a_fifth_of_its_peers_rate_is() -> None:
    peers = [sample(queue=10, rate=1000.0), sample(queue=20, rate=1000.0)]
    reason = verdict(sample(queue=150, rate=100.0), peers, SETTINGS)
    assert reason is not None
    assert "sr3.straggler.rate.ratio" in reason


def test_under_backpressure_the_queue_against_the_peers_decides() -> None:
    # every task processes at the bottleneck's pace; only the queues differ
    peers = [sample(queue=5, rate=200.0), sample(queue=8, rate=200.0)]
    assert verdict(sample(queue=900, rate=200.0), peers, SETTINGS) is not None


def test_a_short_queue_is_never_a_straggler_by_rate() -> None:
    peers = [sample(queue=0, rate=1000.0)]
    assert verdict(sample(queue=99, rate=0.0), peers, SETTINGS) is None


def test_a_task_alone_with_a_long_queue_is_only_when_it_processed_none() -> None:
    reason = verdict(sample(queue=100, rate=0.0), [], SETTINGS)
    assert reason is not None
    assert "no peers" in reason
    # catching up after a burst
    assert verdict(sample(queue=5000, rate=800.0), [], SETTINGS) is None


def test_an_unknown_policy_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(ConfigError, match="sr3.straggler.policy") as info:
        StragglerSettings.from_conf({"sr3.straggler.policy": "speculate"})
    assert "off, duplicate, restart" in str(info.value)


def test_settings_read_from_a_storm_conf() -> None:
    settings = StragglerSettings.from_conf(
        {"sr3.straggler.policy": "restart", "sr3.straggler.lag.s": 2}
    )
    assert settings.policy is StragglerPolicy.RESTART
    assert settings.lag_s == 2.0


def task(task_id: int, *, stateful: bool) -> TaskRuntime:
    component = ComponentInfo(
        name="count" if stateful else "split",
        kind="bolt",
        component_cls=object,
        command="streamparse_run",
        script="x.Count",
        par=1,
        tasks=1,
        config={},
        outputs={},
        stateful=stateful,
    )
    return TaskRuntime(task_id, component, {}, TaskSettings.from_conf({}))


def deliver(log: InputLog, rt: TaskRuntime, tuple_id: str) -> None:
    message: dict[str, Any] = {"id": tuple_id, "tuple": [tuple_id]}
    rt.inputs[tuple_id] = PendingInput({}, "split", "default", [tuple_id])
    log.delivered(rt, tuple_id, message)


def test_a_stateful_task_log_is_cut_at_the_committed_barrier() -> None:
    rt = task(1, stateful=True)
    log = InputLog({1: rt})
    for tuple_id in ("a", "b"):
        deliver(log, rt, tuple_id)
    log.barrier(rt, 7)
    for tuple_id in ("c", "d"):
        deliver(log, rt, tuple_id)
    log.barrier(rt, 8)
    deliver(log, rt, "e")
    rt.inputs.clear()  # all processed: a stateful duplicate restores epoch 7
    log.committed(7)
    assert [t for t, _ in log.since_commit(rt)] == ["c", "d", "e"]
    log.committed(8)
    assert [t for t, _ in log.since_commit(rt)] == ["e"]


def test_a_stateless_task_duplicate_gets_only_what_it_owes() -> None:
    rt = task(2, stateful=False)
    log = InputLog({2: rt})
    for tuple_id in ("a", "b", "c"):
        deliver(log, rt, tuple_id)
    del rt.inputs["a"]
    assert [t for t, _ in log.since_commit(rt)] == ["b", "c"]
    log.committed(3)
    assert log.size() == 2


class _Forwarded:
    """Records what a race sends downstream and which inputs it settles."""

    def __init__(self) -> None:
        self.emits: list[list[Any]] = []
        self.settled: list[str] = []

    def emit(self, rt: TaskRuntime, msg: ShellMsg, reply_to: object) -> None:
        self.emits.append(list(msg.values))

    def settle(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        self.settled.append(str(msg.msg_id))
        rt.inputs.pop(str(msg.msg_id), None)


def _msg(command: str, **fields: Any) -> ShellMsg:
    return parse_shell_msg({"command": command, **fields}, component="count", task_id=1)


def test_a_race_sends_each_output_and_ack_downstream_once() -> None:
    rt = task(1, stateful=True)
    forwarded = _Forwarded()
    stragglers = Stragglers(
        settings=SETTINGS,
        tasks={1: rt},
        component_tasks=lambda _name: [1],
        timers=TimerQueue(),
        clock=lambda: 0.0,
        journal=Journal(["count"], lambda: 0.0, 100),
        supervisor=MagicMock(spec_set=Supervisor),
        coordinator=None,
        emit=forwarded.emit,
        settle=forwarded.settle,
    )
    entries: list[tuple[str, dict[str, Any]]] = [(t, {"id": t}) for t in "abc"]
    for tuple_id in "bc":  # the original processed a and emitted once for b
        rt.inputs[tuple_id] = PendingInput({}, "split", "default", [tuple_id])
    race = Race(
        rt,
        MagicMock(),
        -1,
        entries,
        original=RaceCopy("original", 1, 1),
        duplicate=RaceCopy("duplicate", 0),
        index={t: i for i, (t, _) in enumerate(entries)},
        forwarded={1: 1},
    )
    dup, original = race.duplicate, race.original
    for copy, command, fields in [
        (dup, "emit", {"tuple": ["a-out"]}),  # a: acked by the original
        (dup, "ack", {"id": "a"}),
        (dup, "emit", {"tuple": ["b-out1"]}),  # the original sent it already
        (dup, "emit", {"tuple": ["b-out2"]}),  # new
        (original, "emit", {"tuple": ["b-out2"]}),  # the duplicate's went out
        (original, "ack", {"id": "b"}),
        (dup, "ack", {"id": "b"}),  # b is acked already
        (dup, "emit", {"tuple": ["c-out1"]}),
        (dup, "ack", {"id": "c"}),
    ]:
        stragglers.message(race, copy, _msg(command, **fields))
    assert forwarded.emits == [["b-out2"], ["c-out1"]]
    assert forwarded.settled == ["b", "c"]
    assert race.at_live_position(original) is False  # it is still at c
    dup.up = True
    assert race.at_live_position(dup)
