"""Stragglers on the local cluster: the check, a restart, or a duplicate that races.

Every ``sr3.straggler.check.s`` each task is sampled (silence, queue, rate)
and judged by :func:`storm_bridge.straggler.verdict`. Under ``restart`` a
straggler is SIGKILLed and recovers as after a crash (a rollback to the last
committed epoch). Under ``duplicate`` (StreamScope's answer) a second
subprocess of the task starts, restores the last committed epoch, and is fed
the task's inputs since that epoch from the input log (the cluster
routes every tuple, so it keeps them: the upstream buffer), then the live
input the original also gets, under the same tuple ids (see
:mod:`storm_bridge.cluster.races`). The copy that first
processed everything delivered takes over and the other is killed. Outputs are
deduplicated by position in the task's input: the k-th emit made while
processing the n-th input goes downstream once, whichever copy makes it first;
an input is acked once, by the first copy that acks it. While the race runs no
epoch opens (the open one is abandoned), so the duplicate's restored epoch
stays the committed one. Spouts, and bolts whose state has no ring, are
restarted instead. :class:`Stragglers` judges and picks the policy; a race
itself is run by :class:`~storm_bridge.cluster.race_runner.RaceRunner`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.process import ProcessEvent
from storm_bridge.cluster.race_runner import Emit, RaceRunner, Settle
from storm_bridge.cluster.races import InputLog, Race, RaceCopy
from storm_bridge.cluster.rollbacks import is_stateful_bolt
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.messages import ShellMsg
from storm_bridge.straggler import (
    StragglerEvent,
    StragglerPolicy,
    StragglerSettings,
    TaskSample,
    verdict,
)

__all__ = ["Stragglers"]

logger = logging.getLogger(__name__)


class Stragglers:
    """Checks for stragglers and applies the policy (the engine thread only).

    Args:
        settings: Thresholds and policy.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        timers: The cluster's timer queue.
        clock: Monotonic clock in seconds.
        journal: Where events go.
        supervisor: Starts duplicates and makes a winner the task's subprocess.
        coordinator: Global checkpoints (None: no duplicate, only restarts).
        emit: Forwards a copy's emit as the engine forwards a bolt's.
        settle: Acks or fails an input as the engine does.
        wall_clock: Wall-clock time, for the report.
    """

    def __init__(  # noqa: PLR0913 - the engine's collaborators
        self,
        *,
        settings: StragglerSettings,
        tasks: Mapping[int, TaskRuntime],
        component_tasks: Callable[[str], list[int]],
        timers: TimerQueue,
        clock: Callable[[], float],
        journal: Journal,
        supervisor: Supervisor,
        coordinator: Coordinator | None,
        emit: Emit,
        settle: Settle,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._tasks = tasks
        self._component_tasks = component_tasks
        self._timers = timers
        self._clock = clock
        self._wall = wall_clock
        self._journal = journal
        self._coordinator = coordinator
        self._runner = RaceRunner(
            settings=settings,
            clock=clock,
            journal=journal,
            supervisor=supervisor,
            coordinator=coordinator,
            emit=emit,
            settle=settle,
            on_decided=self._handled,
        )
        self.log = InputLog(tasks)
        self.events: list[StragglerEvent] = []
        self._acted: dict[int, int] = {}
        self._last: dict[int, tuple[float, int]] = {}
        #: A straggler was handled: judge again once an epoch committed.
        self._settling = False
        self.started_at = self._checked_at = clock()
        self.logging = settings.policy is StragglerPolicy.DUPLICATE and (
            coordinator is not None
        )
        if coordinator is not None:
            coordinator.on_commit = self._committed
            coordinator.on_rollback = self._rolled_back
            coordinator.holds_epochs = self.racing
            coordinator.straggler_report = self.report
            if self.logging:
                coordinator.barrier_sent_hook(self.log.barrier)

    # -- hooks -------------------------------------------------------------------------

    def start(self) -> None:
        """Start checking (nothing under policy ``off``)."""
        if self.settings.policy is StragglerPolicy.OFF:
            return
        self.started_at = self._checked_at = self._clock()

        def check() -> None:
            self.check()
            self._timers.at(self._clock() + self.settings.check_s, check)

        self._timers.at(self._clock() + self.settings.check_s, check)

    def delivered(
        self, rt: TaskRuntime, tuple_id: str, message: dict[str, Any]
    ) -> None:
        """A tuple was sent to a bolt task: log it, mirror it to a duplicate."""
        if not self.logging:
            return
        self.log.delivered(rt, tuple_id, message)
        race = self._runner.race_of(rt.task_id)
        if race is not None:
            race.add(tuple_id, message)

    def racing(self) -> bool:
        """Whether a straggler and its duplicate race."""
        return self._runner.racing()

    def race_of(self, rt: TaskRuntime) -> Race | None:
        """The race ``rt`` is in, if any."""
        return self._runner.race_of(rt.task_id)

    def task_died(self, rt: TaskRuntime) -> None:
        """A task died: end its race (the failure path takes over), drop its log."""
        self._runner.abort(rt.task_id)
        self.log.forget(rt.task_id)

    def _rolled_back(self) -> None:
        self._runner.abort()
        self.log.forget()

    def _committed(self, epoch: int) -> None:
        self.log.committed(epoch)
        self._settling = False
        now = self._wall()
        for event in self.events:
            if event.decided_at is not None and event.resumed_unix is None:
                event.resumed_unix = now
                event.resumed_epoch = epoch

    def stop(self) -> None:
        """Kill every duplicate still racing."""
        self._runner.abort()

    def report(self) -> list[dict[str, Any]]:
        """The run report's straggler entries."""
        return [e.to_dict(self.started_at) for e in self.events]

    # -- detection ---------------------------------------------------------------------

    def _sample(self, rt: TaskRuntime, now: float, dt: float) -> TaskSample:
        process = rt.process
        queue = len(rt.inputs) + (process.outbox_size if process is not None else 0)
        talking = not rt.is_spout or rt.awaiting is not None
        silent = now - rt.last_heard if talking else 0.0
        last_at, last_count = self._last.get(rt.task_id, (now, rt.processed))
        rate = (rt.processed - last_count) / dt if dt > 0 and now > last_at else 0.0
        return TaskSample(rt.task_id, silent, queue, rate)

    def check(self) -> None:
        """Sample every task and act on the first new straggler.

        Nothing is judged while a race runs (one duplicate at a time), from
        a straggler's restart or a race's end until an epoch commits after
        it, during a rollback (until an epoch commits after it: replaying
        tasks lag by nature), nor when this check runs late: the cluster
        thread itself was held up, so every task looks silent.
        """
        now = self._clock()
        late = now - self._checked_at > 2 * self.settings.check_s
        self._checked_at = now
        coordinator = self._coordinator
        recovering = coordinator is not None and coordinator.recovering
        if late or self._runner.racing() or self._settling or recovering:
            self._last.clear()
            return
        samples: dict[int, TaskSample] = {}
        for task_id, rt in self._tasks.items():
            last_at = self._last.get(task_id, (now, 0))[0]
            samples[task_id] = self._sample(rt, now, now - last_at)
            self._last[task_id] = (now, rt.processed)
        for task_id, rt in self._tasks.items():
            if rt.state is not TaskState.RUNNING or not rt.came_up:
                continue
            racing = self._runner.race_of(task_id) is not None
            if racing or self._acted.get(task_id) == rt.incarnation:
                continue
            peers = [
                samples[t]
                for t in self._component_tasks(rt.component.name)
                if t != task_id and t in samples
            ]
            others = [s for t, s in samples.items() if t != task_id]
            reason = verdict(samples[task_id], peers, self.settings, others)
            if reason is not None:
                self._act(rt, reason)
                return

    def _index(self, rt: TaskRuntime) -> int:
        return self._component_tasks(rt.component.name).index(rt.task_id)

    def _act(self, rt: TaskRuntime, reason: str) -> None:
        self._acted[rt.task_id] = rt.incarnation
        policy = self.settings.policy
        if policy is StragglerPolicy.DUPLICATE and not self._can_duplicate(rt):
            policy = StragglerPolicy.RESTART
        event = StragglerEvent(
            rt.component.name,
            self._index(rt),
            rt.task_id,
            policy,
            reason,
            self._clock(),
            self._wall(),
        )
        self.events.append(event)
        where = f"{rt.component.name}:{event.task}"
        logger.warning(
            "straggler %s (task id %s): %s; policy %s",
            where,
            rt.task_id,
            reason,
            policy.value,
        )
        self._journal.record(
            EventKind.STRAGGLER,
            rt.component.name,
            rt.task_id,
            f"straggler: {reason}; policy {policy.value}",
            policy=policy.value,
        )
        if policy is StragglerPolicy.RESTART:
            event.winner = "restart"
            event.decided_at = self._clock()
            self._handled()
            if rt.process is not None:
                rt.killed = rt.incarnation  # not a death of its own
                rt.process.kill()  # its reader's EOF takes the failure path
            return
        self._runner.start(rt, event, self.log.since_commit(rt))

    def _can_duplicate(self, rt: TaskRuntime) -> bool:
        if not self.logging or rt.is_spout or rt.process is None:
            return False
        # a stateful bolt without a ring keeps its state in memory only: a
        # copy could not restore it
        return not is_stateful_bolt(rt) or bool(rt.conf.get("sr3.zk.hosts"))

    def _handled(self) -> None:
        """A straggler was restarted or its race ended: wait for a commit."""
        self._settling = self._coordinator is not None

    # -- the race (run by the RaceRunner) ----------------------------------------------

    def copy_event(self, event: ProcessEvent) -> ProcessEvent | None:
        """Handle an event of a duplicate's subprocess (negative incarnation).

        Returns:
            The event to handle as the task's own (the duplicate took over
            before the engine read it), or None.
        """
        return self._runner.copy_event(event)

    def original_message(self, race: Race, msg: ShellMsg) -> None:
        """An emit, ack, fail or sync of the racing task's own subprocess.

        Raises:
            MultilangProtocolError: forwarding an emit failed.
        """
        self._runner.original_message(race, msg)

    def message(self, race: Race, copy: RaceCopy, msg: ShellMsg) -> None:
        """Apply a copy's emit, ack or fail once for the task.

        Raises:
            MultilangProtocolError: forwarding an emit failed.
        """
        self._runner.message(race, copy, msg)
