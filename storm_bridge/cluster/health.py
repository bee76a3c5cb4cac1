"""Whether a run's tasks stayed up: the tasks that died on their own, and how they end.

Storm restarts a dead worker forever, so a topology whose bolt raises in
``initialize`` every time "runs" until someone looks. A run of the local cluster
is judged at its end instead: a task that died on its own (it exited, stayed
silent or broke the protocol; a ``--kill`` or a rollback's restart does not
count) either came back, kept crashing, or is still down.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from storm_bridge.cluster.tasks import TaskRuntime, TaskState

__all__ = [
    "CRASH_LOOP_DEATHS",
    "TaskFailure",
    "TaskOutcome",
    "never_up",
    "settled",
    "task_failures",
]

#: Own deaths of a task that make it one that kept crashing: one or two (a
#: poison tuple, a lost connection) are what Storm's restarts are for.
CRASH_LOOP_DEATHS: Final = 3
_FIX: Final = (
    "fix the component and run again (`sr3 --log-level INFO run ...` logs its stderr)"
)


class TaskOutcome(enum.Enum):
    """How a task that died on its own ends the run."""

    RECOVERED = "recovered"
    """Its current subprocess came up again (``initialize`` returned)."""
    CRASH_LOOP = "crash_loop"
    """It died :data:`CRASH_LOOP_DEATHS` times or more on its own."""
    DOWN = "down"
    """Its current subprocess has not come up (it is restarting or initializing)."""


@dataclass(frozen=True)
class TaskFailure:
    """One task that died on its own during the run.

    Attributes:
        component: Its component id.
        index: Its index among the component's tasks (as ``--kill`` names it).
        task_id: Its Storm task id.
        deaths: Deaths of its own making.
        restarts: Subprocesses started after the first one.
        outcome: How it ends the run.
        last_error: What ended its last subprocess that died on its own.
    """

    component: str
    index: int
    task_id: int
    deaths: int
    restarts: int
    outcome: TaskOutcome
    last_error: str

    @property
    def failed(self) -> bool:
        """Whether the run must not count as a success because of this task."""
        return self.outcome is not TaskOutcome.RECOVERED

    def message(self) -> str:
        """One line naming the task, what became of it, its restarts and last error."""
        what = {
            TaskOutcome.RECOVERED: "came back",
            TaskOutcome.CRASH_LOOP: "kept crashing",
            TaskOutcome.DOWN: "did not come back",
        }[self.outcome]
        line = (
            f"component {self.component!r} task {self.index} (task id "
            f"{self.task_id}) {what}: it died {self.deaths} time(s) on its own "
            f"and was restarted {self.restarts} time(s); last error: "
            f"{self.last_error}"
        )
        return f"{line}; {_FIX}" if self.failed else line

    def to_dict(self) -> dict[str, Any]:
        """Return the ``--json`` report's entry."""
        return {
            "component": self.component,
            "task": self.index,
            "task_id": self.task_id,
            "outcome": self.outcome.value,
            "deaths": self.deaths,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "message": self.message(),
        }


def _outcome(rt: TaskRuntime) -> TaskOutcome:
    if rt.own_deaths >= CRASH_LOOP_DEATHS:
        return TaskOutcome.CRASH_LOOP
    if rt.state is TaskState.RUNNING and rt.came_up:
        return TaskOutcome.RECOVERED
    return TaskOutcome.DOWN


def never_up(tasks: Iterable[TaskRuntime]) -> list[TaskRuntime]:
    """The tasks that cannot come up: an ``initialize`` that raises every time.

    Their last :data:`CRASH_LOOP_DEATHS` subprocesses all died on their own
    before answering anything after their handshake.
    """
    return [rt for rt in tasks if rt.down_streak >= CRASH_LOOP_DEATHS]


def settled(tasks: Iterable[TaskRuntime]) -> bool:
    """Whether every task that died on its own came back or is a crash loop."""
    return all(_outcome(rt) is not TaskOutcome.DOWN for rt in tasks if rt.own_deaths)


def task_failures(
    tasks: Iterable[TaskRuntime], indexes: dict[int, int]
) -> list[TaskFailure]:
    """Return the tasks that died on their own, by task id.

    Args:
        tasks: Every task's runtime.
        indexes: Task id -> index among its component's tasks.
    """
    return [
        TaskFailure(
            component=rt.component.name,
            index=indexes[rt.task_id],
            task_id=rt.task_id,
            deaths=rt.own_deaths,
            restarts=max(0, rt.incarnation - 1),
            outcome=_outcome(rt),
            last_error=rt.last_death or "unknown",
        )
        for rt in sorted(tasks, key=lambda t: t.task_id)
        if rt.own_deaths
    ]
