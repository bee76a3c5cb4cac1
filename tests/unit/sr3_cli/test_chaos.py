"""Recovery times of a campaign, per failure kind, from its runs' reports."""

from __future__ import annotations

from typing import Any

from sr3_cli.chaos import Fault, Outcome, Schedule, recovery_times, summarize_recoveries
from storm_bridge.report import RunReport


def recovery(cause: str, detect: float, restore: float | None, replay: float) -> Any:
    timeline = {"detect_s": detect, "restore_s": restore, "replay_s": replay}
    return {"cause": cause, "timeline": timeline}


def outcome(faults: tuple[Fault, ...], recoveries: list[Any]) -> Outcome:
    report = RunReport(
        topology="t",
        seconds=1.0,
        idle=True,
        counters={},
        checkpoints={},
        recoveries=recoveries,
        state={},
        errors=[],
    )
    return Outcome(Schedule(1, 0, "local", faults), True, 1.0, report=report)


def test_recoveries_are_timed_from_the_failure_and_sorted_by_its_kind() -> None:
    faults = (
        Fault("kill-task", 0.5, "count:1"),
        Fault("kill-node", 1.0, "node-2", 2.0),
        Fault("freeze-node", 1.5, "node-3", 3.0),
    )
    runs = [
        outcome(
            faults,
            [
                recovery("count:1", 0.1, 0.2, 0.3),
                recovery("ring node node-2, count:0", 0.5, 0.5, 1.0),
                recovery("ring node node-3", 2.0, 1.0, 1.0),
                recovery("split:0", 0.1, 0.1, 0.1),
                recovery("count:1", 0.1, None, 0.1),  # never restored: left out
            ],
        ),
        outcome((Fault("kill-task", 0.5, "count:1"),), [recovery("count:1", 0, 1, 1)]),
    ]
    times = recovery_times(runs)
    assert {k: [round(v, 3) for v in t] for k, t in times.items()} == {
        "kill-task": [0.6, 2.0],
        "kill-node": [2.0],
        "freeze-node": [4.0],
        "other": [0.3],
    }
    summary = summarize_recoveries(times)
    assert summary["kill-task"] == {
        "count": 2,
        "p50_s": 0.6,
        "p99_s": 2.0,
        "max_s": 2.0,
    }
    assert summary["other"]["count"] == 1
