"""Global checkpoints of the local cluster: epochs, aligned barriers, rollback.

The coordinator opens epoch ``e`` every ``sr3.checkpoint.interval.s`` once the
previous one committed. Each replayable spout task gets a barrier command and
emits a barrier (its offset inside) on
:data:`~storm_bridge.components.BARRIER_STREAM`; a plain spout's
barrier is injected between two of its commands. A barrier goes to every task
of every downstream component (ALL grouping). Each bolt task aligns: once the
barrier of a channel (upstream task) arrived, later tuples of that channel are
held back until every channel delivered its barrier. Then:

* a stateful task gets the barrier as a tuple; it captures its keyed state and
  emits the barrier on (forwarded downstream at once), then writes the snapshot
  to the ring in the background and reports it (``sr3.snapshot`` metric);
* a stateless task forwards the barrier once every input it had before the
  alignment is acked or failed (its outputs for them were emitted before);
  until then its later tuples stay held, so a bolt that combines inputs (a
  ``BatchingBolt``) never folds tuples of the next epoch into this one's
  output. A bolt that acks an input only once later ones arrive holds the
  epoch back until ``sr3.checkpoint.timeout.s`` abandons it.

Epoch ``e`` commits (:mod:`~storm_bridge.cluster.commits`) when every spout
task and every stateful task reported. Any task death rolls the whole topology
back: every task restarts, stateful tasks restore the committed epoch's state,
replayable spouts seek to its offsets, and tuples in flight are lost. Plain
spouts keep running: the trees of their lost tuples fail back to them, as in
Storm.
Barriers never travel on a subscription that closes a cycle (see
:func:`~storm_bridge.cluster.context.back_edges`),
so a bolt reading its own output back never waits for itself. A
topology with neither stateful bolts nor replayable spouts has nothing to roll
back: a task death only abandons the open epoch and, as in Storm, only the dead
task restarts (the trees of its lost tuples fail back to their spouts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from storm_bridge.cluster.barriers import BARRIER_SOURCE, Deliver
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.epoch_cycle import EpochCycle
from storm_bridge.cluster.epochs import EpochStats
from storm_bridge.cluster.rollbacks import Recovery, Rollbacks
from storm_bridge.cluster.tasks import TaskRuntime, TimerQueue
from topology_api.topology import LoadedTopology

__all__ = ["BARRIER_SOURCE", "Coordinator", "EpochStats", "Recovery"]

logger = logging.getLogger(__name__)


class Coordinator(EpochCycle):
    """Runs global epochs over the cluster's tasks (the engine thread only).

    Opening, committing and abandoning epochs is its
    :class:`~storm_bridge.cluster.epoch_cycle.EpochCycle` base's; it adds
    what a task death does: a rollback to the last committed epoch. Recording
    a complete epoch's commit is a
    :class:`~storm_bridge.cluster.commits.Commits`', barrier alignment a
    :class:`~storm_bridge.cluster.barriers.BarrierRouter`'s, rollbacks and their
    timelines a :class:`~storm_bridge.cluster.rollbacks.Rollbacks`'.

    Args:
        topology: The topology.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        settings: Interval, first epoch and commit hooks.
        timers: The cluster's timer queue.
        clock: Monotonic clock in seconds.
        queue_spout_command: Queues a command to a spout task.
        deliver: Delivers a tuple to a bolt task, bypassing alignment.
        recycle: Kills and restarts a task as part of a rollback.
    """

    def __init__(
        self,
        *,
        topology: LoadedTopology,
        tasks: Mapping[int, TaskRuntime],
        component_tasks: Callable[[str], list[int]],
        settings: CheckpointSettings,
        timers: TimerQueue,
        clock: Callable[[], float],
        queue_spout_command: Callable[[TaskRuntime, str, Any], None],
        deliver: Deliver,
        recycle: Callable[[TaskRuntime], None],
    ) -> None:
        super().__init__(
            topology=topology,
            tasks=tasks,
            component_tasks=component_tasks,
            settings=settings,
            timers=timers,
            clock=clock,
            queue_spout_command=queue_spout_command,
            deliver=deliver,
            rollbacks=Rollbacks(tasks=tasks, clock=clock, recycle=recycle),
        )
        #: Called before a rollback recycles the tasks.
        self.on_rollback: Callable[[], None] | None = None
        #: The run report's straggler entries (set by the engine).
        self.straggler_report: Callable[[], list[dict[str, Any]]] = list
        #: Called with (task, params) as a stateful task reports a restore.
        self.on_restored: Callable[[TaskRuntime, Any], None] | None = None
        #: Whether a live rebalance is under way: a failure then must roll the
        #: whole topology back (a task-scope recovery must not run).
        self.rebalance_in_progress: Callable[[], bool] = lambda: False
        #: Called with (task, params) as a task reports a key-group hand-over
        #: command carried out (``sr3.keygroups``; key-groups routing).
        self.on_key_groups: Callable[[TaskRuntime, Any], None] | None = None
        #: The run report's task-scope recovery entry (set by the engine).
        self.local_report: Callable[[], dict[str, Any]] = dict

    # -- failures ----------------------------------------------------------------------

    @property
    def rolls_back(self) -> bool:
        """Whether a task death rolls back (something to restore or seek)."""
        return self._rollbacks.needed

    @property
    def recoveries(self) -> list[Recovery]:
        """Every rollback of this run, oldest first."""
        return self._rollbacks.recoveries

    @property
    def recovering(self) -> bool:
        """Whether a rollback is under way (no epoch committed since it began)."""
        recovery = self.recoveries[-1] if self.recoveries else None
        return recovery is not None and recovery.resumed_at is None

    def task_died(self, rt: TaskRuntime, reason: str = "") -> None:
        """A task died: roll the whole topology back to the last committed epoch.

        Without stateful bolts and replayable spouts there is nothing to roll
        back: the open epoch is abandoned (its barriers died with the task) and
        only the dead task restarts, as Storm restarts only a dead worker.
        """
        index = self._index[rt.task_id]
        cause = f"{rt.component.name}:{index}"
        if not self.rolls_back:
            logger.warning(
                "%s died; nothing to roll back (no stateful bolt, no replayable "
                "spout): only it restarts",
                cause,
            )
            if self._current is not None:
                self._drop_epoch()
                self._schedule(self._settings.interval_s)
            return
        self.rollback(cause, rt.component.name, index, rt.task_id, reason=reason)

    def rollback(  # noqa: PLR0913 - a recovery's fields
        self,
        cause: str,
        component: str = "",
        task_index: int | None = None,
        task_id: int | None = None,
        *,
        reason: str = "",
    ) -> None:
        """Restart every task from the last committed epoch; drop the in-flight."""
        logger.warning("rolling back to the last committed epoch: %s", cause)
        if self.on_rollback is not None:
            self.on_rollback()
        self._current = None
        self._barriers.discard_all()
        self._rollbacks.start(cause, component, task_index, task_id, reason)
        self._schedule(0.0)

    def restore_progress(self, rt: TaskRuntime, params: Any) -> None:
        """A restored task processed its first tuple, or its whole state arrived."""
        owner = self._owners.get(rt.task_id)
        if owner is not None and isinstance(params, dict):
            self._rollbacks.progress(owner, params)

    def restored(self, rt: TaskRuntime, params: Any) -> None:
        """A stateful task reported its restore; note when all have."""
        if self.on_restored is not None:
            self.on_restored(rt, params)
        if self._rollbacks.restored(self._owners[rt.task_id], params):
            self._schedule(0.0)
