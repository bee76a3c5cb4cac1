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

from storm_bridge.cluster.barriers import BARRIER_SOURCE, BarrierRouter, Deliver
from storm_bridge.cluster.commits import CheckpointSettings, Commits, task_owners
from storm_bridge.cluster.epochs import EpochStats, OpenEpoch
from storm_bridge.cluster.rollbacks import (
    Recovery,
    Rollbacks,
    is_replayable,
    is_stateful_bolt,
)
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import BARRIER_COMMAND
from storm_bridge.errors import CheckpointError
from topology_api.topology import LoadedTopology

__all__ = ["BARRIER_SOURCE", "Coordinator", "EpochStats", "Recovery"]

logger = logging.getLogger(__name__)


class Coordinator:
    """Runs global epochs over the cluster's tasks (the engine thread only).

    It opens and abandons epochs itself; recording a complete epoch's commit is
    a :class:`~storm_bridge.cluster.commits.Commits`', barrier alignment a
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
        self._topology = topology
        self._tasks = tasks
        self._settings = settings
        self._timers = timers
        self._clock = clock
        self._queue = queue_spout_command
        self._barriers = BarrierRouter(
            topology=topology,
            tasks=tasks,
            component_tasks=component_tasks,
            deliver=deliver,
        )
        self._rollbacks = Rollbacks(tasks=tasks, clock=clock, recycle=recycle)
        self._commits = Commits(settings.hooks, clock)
        self._owners, self._index = task_owners(topology, tasks, component_tasks)
        #: Called with each epoch committed (a straggler's input log is cut).
        self.on_commit: Callable[[int], None] | None = None
        #: Called before a rollback recycles the tasks.
        self.on_rollback: Callable[[], None] | None = None
        #: While it returns True no epoch opens (a straggler's race is on).
        self.holds_epochs: Callable[[], bool] | None = None
        #: Set once the run ended: no epoch opens after the final one.
        self.closed = False
        #: The run report's straggler entries (set by the engine).
        self.straggler_report: Callable[[], list[dict[str, Any]]] = list
        #: Called with (task, params) as a stateful task reports a restore.
        self.on_restored: Callable[[TaskRuntime, Any], None] | None = None
        #: Called with the epoch as an open epoch is dropped without a commit.
        self.on_dropped: Callable[[int], None] | None = None
        #: Whether something besides barriers holds tuples (a rebalance).
        self.also_busy: Callable[[], bool] | None = None
        #: Whether a live rebalance is under way: a failure then must roll the
        #: whole topology back (a task-scope recovery must not run).
        self.rebalance_in_progress: Callable[[], bool] = lambda: False
        self._component_tasks = component_tasks
        self._deliver = deliver
        #: The run report's task-scope recovery entry (set by the engine).
        self.local_report: Callable[[], dict[str, Any]] = dict
        self._next_epoch = settings.first_epoch
        self._current: OpenEpoch | None = None
        #: Stats of every epoch this run committed, oldest first.
        self.committed: list[EpochStats] = self._commits.committed
        #: Epochs abandoned after ``timeout_s``.
        self.abandoned = 0
        self._started = False

    def retask(self) -> None:
        """Re-read the task lists after tasks were added or removed (a rebalance).

        Only between epochs: barrier alignments are rebuilt from the new lists.

        Raises:
            CheckpointError: an epoch is open.
        """
        if self._current is not None:
            msg = f"cannot change tasks while epoch {self._current.epoch} is open"
            raise CheckpointError(msg)
        component_tasks = self._component_tasks
        hook = self._barriers.on_barrier_sent
        self._barriers = BarrierRouter(
            topology=self._topology,
            tasks=self._tasks,
            component_tasks=component_tasks,
            deliver=self._deliver,
        )
        self._barriers.on_barrier_sent = hook
        self._owners, self._index = task_owners(
            self._topology, self._tasks, component_tasks
        )

    @property
    def rolls_back(self) -> bool:
        """Whether a task death rolls back (something to restore or seek)."""
        return self._rollbacks.needed

    @property
    def recoveries(self) -> list[Recovery]:
        """Every rollback of this run, oldest first."""
        return self._rollbacks.recoveries

    # -- epochs ------------------------------------------------------------------------

    @property
    def last_committed(self) -> int | None:
        """Number of the last epoch committed by this run."""
        return self.committed[-1].epoch if self.committed else None

    @property
    def next_epoch(self) -> int:
        """The number the next epoch opened will get."""
        return self._next_epoch

    @property
    def in_flight(self) -> int | None:
        """The open epoch, if any."""
        return None if self._current is None else self._current.epoch

    def start(self) -> None:
        """Schedule the first epoch."""
        if not self._started:
            self._started = True
            self._schedule(self._settings.interval_s)

    def _schedule(self, delay_s: float) -> None:
        self._timers.at(self._clock() + delay_s, self._tick)

    def _tick(self) -> None:
        if self._current is None and not self.open_epoch():
            self._schedule(min(self._settings.interval_s, 0.05))

    def open_epoch(self) -> bool:
        """Open the next epoch now if none is open and every task runs.

        Returns:
            Whether an epoch was opened.
        """
        if self._current is not None or self.closed:
            return False
        if any(rt.state is not TaskState.RUNNING for rt in self._tasks.values()):
            return False
        if self._rollbacks.restoring():
            return False
        if self.holds_epochs is not None and self.holds_epochs():
            return False
        epoch = self._next_epoch
        self._next_epoch += 1
        spouts = {t for t, rt in self._tasks.items() if rt.is_spout}
        stateful = {t for t, rt in self._tasks.items() if is_stateful_bolt(rt)}
        self._current = OpenEpoch(epoch, self._clock(), spouts, stateful)
        logger.debug("epoch %s opened", epoch)
        self._timers.at(
            self._clock() + self._settings.timeout_s, lambda: self._expire(epoch)
        )
        for task_id in sorted(spouts):
            rt = self._tasks[task_id]
            if is_replayable(rt):
                self._queue(rt, BARRIER_COMMAND, epoch)
            elif rt.awaiting is None:
                self._inject(rt, epoch)
            else:
                self._current.injections.add(task_id)
        return True

    def _expire(self, epoch: int) -> None:
        current = self._current
        if current is None or current.epoch != epoch:
            return
        waiting = sorted(self._owners[t] for t in (*current.spouts, *current.stateful))
        logger.error(
            "epoch %s abandoned after %s s; still waiting for %s (a bolt that does "
            "not ack its inputs holds barriers back)",
            epoch,
            self._settings.timeout_s,
            waiting,
        )
        self.abandoned += 1
        self._drop_epoch()
        self._schedule(self._settings.interval_s)

    @property
    def recovering(self) -> bool:
        """Whether a rollback is under way (no epoch committed since it began)."""
        recovery = self.recoveries[-1] if self.recoveries else None
        return recovery is not None and recovery.resumed_at is None

    def abandon_open_epoch(self, why: str = "for a straggler") -> None:
        """Abandon the open epoch, if any: held tuples are delivered, no commit.

        A straggler's race does this: the straggler cannot report the epoch,
        and its duplicate restores the last committed one. So does a task
        recovered alone: it restores the last committed epoch.
        """
        if self._current is not None:
            logger.info("epoch %s abandoned %s", self._current.epoch, why)
            self.abandoned += 1
            self._drop_epoch()
            self._schedule(self._settings.interval_s)

    def barrier_sent_hook(self, hook: Callable[[TaskRuntime, int], None]) -> None:
        """Call ``hook(task, epoch)`` as a barrier is sent to a stateful task.

        Hooks added before are called first.
        """
        first = self._barriers.on_barrier_sent
        if first is None:
            self._barriers.on_barrier_sent = hook
            return

        def both(rt: TaskRuntime, epoch: int) -> None:
            first(rt, epoch)
            hook(rt, epoch)

        self._barriers.on_barrier_sent = both

    def barrier_forward_hook(self, hook: Callable[[TaskRuntime, int], None]) -> None:
        """Call ``hook(task, epoch)`` as a task's barrier is forwarded downstream."""
        self._barriers.on_forward = hook

    def _drop_epoch(self) -> None:
        """Forget the open epoch and every alignment; deliver the held tuples."""
        dropped, self._current = self._current, None
        self._barriers.release_all()
        if dropped is not None and self.on_dropped is not None:
            self.on_dropped(dropped.epoch)

    def spout_synced(self, rt: TaskRuntime) -> None:
        """A spout answered a command: inject a pending barrier of a plain spout."""
        current = self._current
        if current is not None and rt.task_id in current.injections:
            current.injections.discard(rt.task_id)
            self._inject(rt, current.epoch)

    def _inject(self, rt: TaskRuntime, epoch: int) -> None:
        self.spout_barrier(rt, [epoch, {"offset": None}])

    def spout_barrier(self, rt: TaskRuntime, values: list[Any]) -> None:
        """A spout task emitted the barrier of the open epoch (its offset inside)."""
        current = self._current
        epoch = int(values[0])
        if (
            current is None
            or epoch != current.epoch
            or rt.task_id not in current.spouts
        ):
            return
        offset = dict(values[1] or {}).get("offset")
        owner = self._owners[rt.task_id]
        current.spout_reported(rt.task_id, owner, offset)
        self._barriers.forward(rt, epoch, {owner: offset})
        self._maybe_commit()

    def bolt_barrier(self, rt: TaskRuntime, values: list[Any]) -> None:
        """A stateful task captured its state and emitted the barrier on."""
        current = self._current
        epoch = int(values[0])
        if current is None or epoch != current.epoch:
            return
        self._barriers.forward_captured(rt, epoch)

    def snapshot_written(self, rt: TaskRuntime, params: Any) -> None:
        """A stateful task's snapshot of the open epoch is durable: its report."""
        current = self._current
        report = dict(params or {})
        if current is None or report.get("epoch") != current.epoch:
            return
        if rt.task_id not in current.stateful:
            return
        current.snapshot_reported(rt.task_id, self._owners[rt.task_id], report)
        self._maybe_commit()

    def _maybe_commit(self) -> None:
        current = self._current
        if current is None or not current.complete:
            return
        owners = sorted(
            self._owners[t] for t, rt in self._tasks.items() if is_stateful_bolt(rt)
        )
        self._current = None
        now = self._commits.commit(current, owners)
        if now is None:
            self._schedule(self._settings.interval_s)
            return
        self._rollbacks.resumed(now)
        if self.on_commit is not None:
            self.on_commit(current.epoch)
        self._schedule(self._settings.interval_s)

    # -- barriers ----------------------------------------------------------------------

    def hold(self, target: int, source_task: int, args: tuple[Any, ...]) -> bool:
        """Hold back a tuple from a channel already past the barrier.

        Returns:
            Whether the tuple was held (the caller must not deliver it).
        """
        return self._barriers.hold(target, source_task, args)

    def input_done(self, rt: TaskRuntime) -> None:
        """A bolt acked or failed an input: forward a barrier it was waiting for.

        Once forwarded, the tuples held back since the alignment are delivered.
        """
        self._barriers.input_done(rt)

    def busy(self) -> bool:
        """Whether tuples are held back or a barrier is still waiting to move."""
        also = self.also_busy
        return self._barriers.busy() or (also is not None and also())

    # -- failures ----------------------------------------------------------------------

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
