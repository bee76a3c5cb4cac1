"""The epoch cycle of the local cluster's global checkpoints: open, report, commit.

:class:`EpochCycle` opens epoch ``e`` every ``sr3.checkpoint.interval.s`` once
the previous one committed and every task runs, sends its barrier to each spout
task (a command to a replayable spout, an injection between two commands of a
plain one), takes the tasks' barrier and snapshot reports, and commits the
epoch once nobody owes one, or abandons it after ``sr3.checkpoint.timeout.s``.
Barrier alignment is a :class:`~storm_bridge.cluster.barriers.BarrierRouter`'s,
recording a commit a :class:`~storm_bridge.cluster.commits.Commits`'. What a
task death does to the cycle (a rollback) is
:class:`~storm_bridge.cluster.checkpoints.Coordinator`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from storm_bridge.cluster.barriers import BarrierRouter, Deliver
from storm_bridge.cluster.commits import CheckpointSettings, Commits, task_owners
from storm_bridge.cluster.epochs import EpochStats, OpenEpoch
from storm_bridge.cluster.rollbacks import Rollbacks, is_replayable, is_stateful_bolt
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import BARRIER_COMMAND
from storm_bridge.errors import CheckpointError
from topology_api.topology import LoadedTopology

__all__ = ["EpochCycle"]

logger = logging.getLogger(__name__)


class EpochCycle:
    """Opens, commits and abandons global epochs (the engine thread only).

    Args:
        topology: The topology.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        settings: Interval, first epoch and commit hooks.
        timers: The cluster's timer queue.
        clock: Monotonic clock in seconds.
        queue_spout_command: Queues a command to a spout task.
        deliver: Delivers a tuple to a bolt task, bypassing alignment.
        rollbacks: The run's rollbacks: no epoch opens while one restores, and
            a commit ends every one before it.
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
        rollbacks: Rollbacks,
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
        self._rollbacks = rollbacks
        self._commits = Commits(settings.hooks, clock)
        self._owners, self._index = task_owners(topology, tasks, component_tasks)
        #: Called with each epoch committed (a straggler's input log is cut).
        self.on_commit: Callable[[int], None] | None = None
        #: While it returns True no epoch opens (a straggler's race is on).
        self.holds_epochs: Callable[[], bool] | None = None
        #: Set once the run ended: no epoch opens after the final one.
        self.closed = False
        #: Called with the epoch as an open epoch is dropped without a commit.
        self.on_dropped: Callable[[int], None] | None = None
        #: The key-group tables a commit records (``{component: encoded
        #: table}``; key-groups routing only).
        self.key_group_tables: Callable[[], dict[str, Any]] | None = None
        #: Whether something besides barriers holds tuples (a rebalance).
        self.also_busy: Callable[[], bool] | None = None
        #: Called with (task, epoch) as a stateful task captured its state for
        #: the open epoch (its barrier went on), and as its snapshot of it is
        #: durable (before the commit that report may complete).
        self.on_captured: Callable[[TaskRuntime, int], None] | None = None
        self.on_written: Callable[[TaskRuntime, int], None] | None = None
        self._component_tasks = component_tasks
        self._deliver = deliver
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
        if self.on_captured is not None:
            self.on_captured(rt, epoch)

    def snapshot_written(self, rt: TaskRuntime, params: Any) -> None:
        """A stateful task's snapshot of the open epoch is durable: its report."""
        current = self._current
        report = dict(params or {})
        if current is None or report.get("epoch") != current.epoch:
            return
        if rt.task_id not in current.stateful:
            return
        current.snapshot_reported(rt.task_id, self._owners[rt.task_id], report)
        if self.on_written is not None:
            self.on_written(rt, current.epoch)
        self._maybe_commit()

    def _maybe_commit(self) -> None:
        current = self._current
        if current is None or not current.complete:
            return
        owners = sorted(
            self._owners[t] for t, rt in self._tasks.items() if is_stateful_bolt(rt)
        )
        self._current = None
        tables = self.key_group_tables() if self.key_group_tables else None
        now = self._commits.commit(current, owners, tables)
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
