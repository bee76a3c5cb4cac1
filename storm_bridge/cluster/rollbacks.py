"""Global rollbacks of the local cluster and their timelines.

A rollback restarts every task but the plain spouts: stateful tasks restore the
committed epoch's state, replayable spouts seek to its offsets. A plain spout
cannot seek, so it keeps running and the trees of its lost tuples fail back to
it (at-least-once). Each rollback is a :class:`Recovery` with its timeline:
detected, restored (every stateful task reported its restore) and resumed (the
next epoch committed). A failure detected before the restore finished joins the
rollback under way instead of starting another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from storm_bridge.cluster.tasks import TaskRuntime, TaskState
from topology_api.contract import is_replayable_class

__all__ = ["Recovery", "Rollbacks", "is_replayable", "is_stateful_bolt"]

#: What a restored task's progress report (``sr3.loaded``) adds to its restore.
_PROGRESS_FIELDS: Final = frozenset(
    {
        "lazy",
        "first_tuple_s",
        "state_loaded_s",
        "loaded_bytes",
        "on_demand_shards",
        "transfer",
        "reason",
    }
)


def is_replayable(rt: TaskRuntime) -> bool:
    """Return whether ``rt`` runs a spout that seeks to a committed offset."""
    return is_replayable_class(rt.component.component_cls)


def is_stateful_bolt(rt: TaskRuntime) -> bool:
    """Return whether ``rt`` runs a bolt with state to snapshot and restore."""
    return rt.component.stateful and not rt.is_spout


@dataclass
class Recovery:
    """One global rollback and its timeline (clock readings).

    Attributes:
        cause: What failed (``component:index`` of a task, or a ring node).
        component: Component of the failed task ('' for a ring node).
        task_index: Index of the failed task in its component (None: ring node).
        task_id: Storm task id of the failed task (None: ring node).
        detected_at: When the failure was detected.
        restored_at: When every stateful task had restored its state.
        resumed_at: When the first epoch after the rollback committed.
        restores: Restore reports of the stateful tasks, by owner.
        scope: ``global`` (every task rolled back) or ``task`` (only the
            failed task restored; :mod:`storm_bridge.cluster.local_recovery`).
        reason: Why this scope (the decision's reason, or a fallback's).
        caught_up_at: Scope task: when the failed task had processed its
            replayed input again.
        replayed_inputs: Scope task: logged inputs fed again to the failed
            tasks (each feed counts, a task killed again while fed too).
        outputs_to_match: Scope task: emits the failed tasks had forwarded
            since their last committed cut, which their re-emits are matched
            with (0: nothing to match, as after a kill right after a commit).
    """

    cause: str
    component: str
    task_index: int | None
    task_id: int | None
    detected_at: float
    restored_at: float | None = None
    resumed_at: float | None = None
    restores: dict[str, Any] = field(default_factory=dict)
    scope: str = "global"
    reason: str = ""
    caught_up_at: float | None = None
    replayed_inputs: int = 0
    outputs_to_match: int = 0


class Rollbacks:
    """Starts rollbacks and keeps their timelines (the engine thread only).

    Args:
        tasks: Task runtimes by id.
        clock: Monotonic clock in seconds.
        recycle: Kills and restarts a task as part of a rollback.
    """

    def __init__(
        self,
        *,
        tasks: Mapping[int, TaskRuntime],
        clock: Callable[[], float],
        recycle: Callable[[TaskRuntime], None],
    ) -> None:
        self._tasks = tasks
        self._clock = clock
        self._recycle = recycle
        #: Every rollback of this run, oldest first.
        self.recoveries: list[Recovery] = []
        #: Whether a task death rolls back (something to restore or seek).
        self.needed = any(
            is_stateful_bolt(rt) or (rt.is_spout and is_replayable(rt))
            for rt in tasks.values()
        )

    def start(  # noqa: PLR0913 - a recovery's fields
        self,
        cause: str,
        component: str,
        task_index: int | None,
        task_id: int | None,
        reason: str = "",
    ) -> None:
        """Record a rollback (or join the one restoring) and recycle the tasks."""
        recovery = self._restoring()
        if recovery is None:
            self.recoveries.append(
                Recovery(
                    cause,
                    component,
                    task_index,
                    task_id,
                    self._clock(),
                    reason=reason,
                )
            )
        else:
            recovery.cause += f", {cause}"
            recovery.restores.clear()
        for rt in self._tasks.values():
            if rt.is_spout and not is_replayable(rt):
                # A plain spout cannot seek: it keeps running, and the trees of
                # its tuples lost with the bolts fail back to it (at-least-once).
                continue
            if rt.state in (TaskState.STARTING, TaskState.RUNNING):
                self._recycle(rt)

    def _restoring(self) -> Recovery | None:
        """The last global rollback if it still waits for restores."""
        recovery = next(
            (r for r in reversed(self.recoveries) if r.scope == "global"), None
        )
        if recovery is None or recovery.restored_at is not None:
            return None
        return recovery

    def restoring(self) -> bool:
        """Whether the last rollback still waits for restores before an epoch opens.

        A rollback without stateful tasks has nothing to restore: it counts as
        restored now.
        """
        recovery = self._restoring()
        if recovery is None:
            return False
        if any(is_stateful_bolt(r) for r in self._tasks.values()):
            return True
        recovery.restored_at = self._clock()
        return False

    def restored(self, owner: str, params: Any) -> bool:
        """A stateful task reported its restore.

        Returns:
            Whether this report completed the restore of the last rollback.
        """
        recovery = self._restoring()
        if recovery is None:
            return False
        recovery.restores[owner] = params
        stateful = [t for t, r in self._tasks.items() if is_stateful_bolt(r)]
        if len(recovery.restores) >= len(stateful):
            recovery.restored_at = self._clock()
            return True
        return False

    def progress(self, owner: str, params: dict[str, Any]) -> None:
        """Add a restored task's progress (first tuple, state arrived) to its restore.

        The latest recovery that restored ``owner`` gets it; a task restored by
        none (its first start) is left out.
        """
        kept = {k: v for k, v in params.items() if k in _PROGRESS_FIELDS}
        for recovery in reversed(self.recoveries):
            report = recovery.restores.get(owner)
            if report is not None:
                recovery.restores[owner] = {**report, **kept}
                return

    def resumed(self, now: float) -> None:
        """An epoch committed at ``now``: every rollback before it resumed."""
        # a task death and a ring node's, detected before any epoch committed in
        # between, are two rollbacks that one commit ends
        for recovery in self.recoveries:
            if recovery.resumed_at is None:
                recovery.resumed_at = now
