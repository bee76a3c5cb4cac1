"""The spout driver's scheduling: one command at a time, pending limits, pauses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.cluster.settings import TaskSettings, topology_conf
from storm_bridge.cluster.spouts import SpoutDriver
from storm_bridge.cluster.tasks import SpoutTuple, TaskRuntime, TaskState, TimerQueue
from storm_bridge.errors import MultilangProtocolError
from topology_api.topology import load_topology


class RecordingProcess:
    """Stands in for the subprocess pipe: records what the driver sends."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, message: Any, *, urgent: bool = False) -> None:
        self.sent.append(message)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_spout(write_topology: Callable[..., Path]) -> Callable[..., TaskRuntime]:
    component = load_topology(write_topology()).components["word_spout"]

    def make(**conf: Any) -> TaskRuntime:
        full = topology_conf("t", {}, conf)
        rt = TaskRuntime(6, component, full, TaskSettings.from_conf(full))
        rt.state = TaskState.RUNNING
        rt.process = RecordingProcess()  # type: ignore[assignment]
        return rt

    return make


def commands(rt: TaskRuntime) -> list[str]:
    return [m["command"] for m in rt.process.sent]  # type: ignore[union-attr]


def empty_nexts(
    driver: SpoutDriver, rt: TaskRuntime, clock: Clock, n: int
) -> list[float]:
    """Answer ``n`` nexts that emitted nothing; return the pause after each."""
    pauses = []
    for _ in range(n):
        driver.synced(rt)  # a next that emitted nothing
        pauses.append(round(rt.next_at - clock.now, 4))
        clock.now = rt.next_at
        driver.pump(rt)
    return pauses


def make_driver(clock: Clock, backpressured: bool = False) -> SpoutDriver:
    return SpoutDriver(
        clock=clock,
        timers=TimerQueue(),
        idle_max_s=0.05,
        backpressured=lambda _rt: backpressured,
    )


def test_one_command_at_a_time_acks_first(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock)
    driver.set_active(True, [rt])
    assert commands(rt) == ["activate"]
    driver.queue(rt, "ack", "m1")
    assert commands(rt) == ["activate"]  # still waiting for the sync
    driver.synced(rt)
    assert commands(rt) == ["activate", "ack"]
    assert rt.process.sent[-1] == {"command": "ack", "id": "m1"}  # type: ignore[union-attr]
    driver.synced(rt)
    assert commands(rt)[-1] == "next"


def test_empty_nexts_back_off(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock)
    driver.set_active(True, [rt])
    driver.synced(rt)  # activate done -> next
    pauses = empty_nexts(driver, rt, clock, 8)
    assert pauses == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05]
    assert rt.empty_streak == 8
    rt.emitted_in_command = 1
    driver.synced(rt)
    assert (rt.empty_streak, rt.next_at) == (0, clock.now)


def test_a_dry_spell_is_dated_from_its_first_empty_next(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock)
    driver.set_active(True, [rt])
    driver.synced(rt)  # activate done -> next
    assert rt.dry_since is None
    started = clock.now
    empty_nexts(driver, rt, clock, 3)
    assert rt.dry_since == started  # run_until_idle counts its quiet from here
    rt.emitted_in_command = 1
    driver.synced(rt)
    assert rt.dry_since is None


def test_max_spout_pending(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout(**{"topology.max.spout.pending": 1})
    driver = make_driver(clock)
    driver.set_active(True, [rt])
    rt.pending.put(1, SpoutTuple("m1", "default", ["w"]))
    driver.synced(rt)
    assert commands(rt) == ["activate"]  # full: no next
    rt.pending.remove(1)
    driver.queue(rt, "ack", "m1")
    driver.synced(rt)
    assert commands(rt) == ["activate", "ack", "next"]


def test_backpressure_and_inactivity_hold_next(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock, backpressured=True)
    driver.set_active(True, [rt])
    driver.synced(rt)
    assert commands(rt) == ["activate"]
    assert rt.wake_at is not None  # retried shortly
    idle = make_spout()
    make_driver(clock).pump(idle)  # never activated
    assert commands(idle) == []


def test_sync_without_a_command(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    with pytest.raises(MultilangProtocolError, match="no command was pending"):
        make_driver(clock).synced(make_spout())


def test_a_spout_waiting_for_its_source_starts_its_dry_spell_over_when_back(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock)
    driver.set_active(True, [rt])
    driver.synced(rt)  # activate done -> next
    empty_nexts(driver, rt, clock, 3)  # while the broker is down
    driver.source_waiting(rt, {"reason": "Kafka at k:9092 unreachable"})
    assert rt.waiting == "Kafka at k:9092 unreachable"
    assert rt.dry_since is not None  # dry, but waiting: not idle (Engine._busy)

    driver.source_waiting(rt, {"reason": None})

    assert rt.waiting is None
    assert (rt.dry_since, rt.empty_streak) == (None, 0)  # the quiet period restarts


def test_a_malformed_waiting_report_means_not_waiting(
    make_spout: Callable[..., TaskRuntime], clock: Clock
) -> None:
    rt = make_spout()
    driver = make_driver(clock)
    driver.source_waiting(rt, {"reason": "down"})

    driver.source_waiting(rt, ["not", "a", "dict"])

    assert rt.waiting is None
