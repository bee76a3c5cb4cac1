"""What ``sr3 run --engine apache-storm`` reports of a recovery, from what it polled.

The epoch store and the ring are scripted (the monitor's own collaborators);
the clock is the poll's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from storm_bridge.sparse.monitor import ControlMonitor
from zk.epoch_control import EpochControl
from zk.epochs import Phase


@dataclass
class Record:
    epoch: int
    offsets: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Script:
    """The control and commit records each poll reads."""

    def __init__(self) -> None:
        self.now = 0.0
        self.control_record: EpochControl | None = None
        self.record: Record | None = None

    def control(self) -> EpochControl | None:
        return self.control_record

    def committed(self, _topology: str) -> Record | None:
        return self.record

    def steps(self) -> list[str]:
        return []

    def reports(self, _step: str) -> dict[str, Any]:
        return {}


def _poll(
    monitor: ControlMonitor,
    script: Script,
    at: float,
    control: EpochControl,
    commit: Record,
) -> None:
    script.now, script.control_record, script.record = at, control, commit
    monitor._poll()  # noqa: SLF001 - one poll of the daemon thread, at a scripted time


def test_a_commit_seen_after_a_kill_but_made_before_it_does_not_end_its_recovery() -> (
    None
):
    script = Script()
    monitor = ControlMonitor(
        script,  # type: ignore[arg-type]  # the store's reads, scripted
        script,  # type: ignore[arg-type]  # the ring's commit record, scripted
        "wc",
        clock=lambda: script.now,
    )
    gen2 = {"generation": 2}
    _poll(
        monitor, script, 1.0, EpochControl(Phase.RUNNING, 5, 2), Record(4, extra=gen2)
    )
    # the kill at 2.0 s; epoch 5 had committed just before, seen by the next poll
    _poll(monitor, script, 2.1, EpochControl(Phase.PAUSE, 6, 2), Record(5, extra=gen2))
    _poll(
        monitor, script, 10.0, EpochControl(Phase.ROLLBACK, 6, 3), Record(5, extra=gen2)
    )
    _poll(
        monitor, script, 11.0, EpochControl(Phase.ROLLBACK, 6, 4), Record(5, extra=gen2)
    )
    _poll(
        monitor, script, 12.0, EpochControl(Phase.RUNNING, 6, 4), Record(5, extra=gen2)
    )
    gen4 = {"generation": 4}
    _poll(monitor, script, 13.0, EpochControl(Phase.PAUSE, 7, 4), Record(6, extra=gen4))
    recovery = monitor.recovery("worker 0", at=2.0, started=0.0)
    # both rollbacks until the first commit after them belong to the kill
    assert recovery["generations"] == [3, 4]
    assert recovery["generation"] == 4
    assert recovery["timeline"] == {"detect_s": 8.0, "restore_s": 2.0, "replay_s": 1.0}
