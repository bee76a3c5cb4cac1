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
restarted instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.cluster.races import InputLog, Race, RaceCopy
from storm_bridge.cluster.rollbacks import is_stateful_bolt
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import BARRIER_STREAM, RESTORED_METRIC
from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import ShellMsg, parse_pid_reply, parse_shell_msg
from storm_bridge.straggler import (
    StragglerEvent,
    StragglerPolicy,
    StragglerSettings,
    TaskSample,
    verdict,
)

__all__ = ["Stragglers"]

logger = logging.getLogger(__name__)

#: (task, message, subprocess to answer ``need_task_ids``) -> forward an emit.
Emit = Callable[[TaskRuntime, ShellMsg, TaskProcess | None], None]
#: (task, ack or fail message) -> settle the input as the engine does.
Settle = Callable[[TaskRuntime, ShellMsg], None]


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
        self._supervisor = supervisor
        self._coordinator = coordinator
        self._emit = emit
        self._settle = settle
        self.log = InputLog(tasks)
        self.events: list[StragglerEvent] = []
        self._races: dict[int, Race] = {}
        self._by_tag: dict[int, Race] = {}
        #: Tags of duplicates that took over -> the task's incarnation then.
        self._adopted: dict[int, int] = {}
        self._acted: dict[int, int] = {}
        self._last: dict[int, tuple[float, int]] = {}
        self._tags = 0
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
        race = self._races.get(rt.task_id)
        if race is not None:
            race.add(tuple_id, message)

    def racing(self) -> bool:
        """Whether a straggler and its duplicate race."""
        return bool(self._races)

    def race_of(self, rt: TaskRuntime) -> Race | None:
        """The race ``rt`` is in, if any."""
        return self._races.get(rt.task_id)

    def task_died(self, rt: TaskRuntime) -> None:
        """A task died: end its race (the failure path takes over), drop its log."""
        race = self._races.get(rt.task_id)
        if race is not None:
            self._end(race, "aborted")
        self.log.forget(rt.task_id)

    def _rolled_back(self) -> None:
        for race in list(self._races.values()):
            self._end(race, "aborted")
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
        for race in list(self._races.values()):
            self._end(race, "aborted")

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
        if late or self._races or self._settling or recovering:
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
            if task_id in self._races or self._acted.get(task_id) == rt.incarnation:
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
            self._settling = self._coordinator is not None
            if rt.process is not None:
                rt.killed = rt.incarnation  # not a death of its own
                rt.process.kill()  # its reader's EOF takes the failure path
            return
        self._duplicate(rt, event)

    def _can_duplicate(self, rt: TaskRuntime) -> bool:
        if not self.logging or rt.is_spout or rt.process is None:
            return False
        # a stateful bolt without a ring keeps its state in memory only: a
        # copy could not restore it
        return not is_stateful_bolt(rt) or bool(rt.conf.get("sr3.zk.hosts"))

    # -- the race ----------------------------------------------------------------------

    def _duplicate(self, rt: TaskRuntime, event: StragglerEvent) -> None:
        self._tags += 1
        tag = -self._tags
        entries = self.log.since_commit(rt)
        first = next(
            (i for i, (t, _) in enumerate(entries) if t in rt.inputs), len(entries)
        )
        race = Race(
            rt,
            event,
            tag,
            entries,
            original=RaceCopy("original", first, rt.emits_since_ack),
            duplicate=RaceCopy("duplicate", 0),
            index={t: i for i, (t, _) in enumerate(entries)},
            heard_at=rt.last_heard,
        )
        if rt.emits_since_ack:
            race.forwarded[first] = rt.emits_since_ack
        try:
            process = self._supervisor.start_copy(rt, tag)
        except OSError as exc:
            logger.error("cannot start a duplicate of task %s: %s", rt.task_id, exc)
            event.winner = "aborted"
            return
        race.duplicate.process = process
        event.replayed = len(entries)
        for _, message in entries:
            process.send(message)
        self._races[rt.task_id] = race
        self._by_tag[tag] = race
        logger.warning(
            "duplicate of %s:%s started (pid %s) with %s inputs since the last "
            "committed epoch",
            rt.component.name,
            event.task,
            process.pid,
            len(entries),
        )
        if self._coordinator is not None:
            # the straggler cannot report the open epoch, and the duplicate
            # restores the committed one: no epoch until one copy is left
            self._coordinator.abandon_open_epoch()

    def copy_event(self, event: ProcessEvent) -> ProcessEvent | None:
        """Handle an event of a duplicate's subprocess (negative incarnation).

        Returns:
            The event to handle as the task's own (the duplicate took over
            before the engine read it), or None.
        """
        adopted = self._adopted.get(event.incarnation)
        if adopted is not None:
            return ProcessEvent(
                event.kind, event.task_id, adopted, event.payload, event.at
            )
        race = self._by_tag.get(event.incarnation)
        if race is None:
            return None  # a retired duplicate's last words
        copy = race.duplicate
        if event.kind != "message":
            self._end(race, "original", why=f"the duplicate ended: {event.kind}")
            return None
        rt = race.rt
        try:
            if copy.pid is None:
                copy.pid = parse_pid_reply(
                    event.payload, component=rt.component.name, task_id=rt.task_id
                )
                copy.up = not is_stateful_bolt(rt)
            else:
                msg = parse_shell_msg(
                    event.payload, component=rt.component.name, task_id=rt.task_id
                )
                self._copy_message(race, copy, msg)
        except MultilangProtocolError as exc:
            self._end(race, "original", why=f"the duplicate failed: {exc}")
            return None
        if race.rt.task_id in self._races and race.at_live_position(copy):
            self._decide(race, copy)
        return None

    def _copy_message(self, race: Race, copy: RaceCopy, msg: ShellMsg) -> None:
        name = race.rt.component.name
        if msg.command == "log":
            logger.info("duplicate of %s task %s: %s", name, race.rt.task_id, msg.msg)
        elif msg.command == "error":
            logger.error("duplicate of %s reported: %s", name, msg.msg)
        elif msg.command == "metrics":
            if msg.metric_name == RESTORED_METRIC:
                copy.up = True
        elif msg.command in ("emit", "ack", "fail"):
            self.message(race, copy, msg)

    def original_message(self, race: Race, msg: ShellMsg) -> None:
        """An emit, ack, fail or sync of the racing task's own subprocess.

        Raises:
            MultilangProtocolError: forwarding an emit failed.
        """
        now = self._clock()
        if now - race.heard_at > self.settings.lag_s / 2:
            race.awake_since = now  # it woke up (again)
        race.heard_at = now
        if msg.command != "sync":
            self.message(race, race.original, msg)
        # a task slowed, not stalled, catches up whenever backpressure holds
        # the input back: it wins only once it has kept answering for
        # sr3.straggler.lag.s (a short stall), never between two stops
        awake = race.awake_since is not None and (
            now - race.awake_since >= self.settings.lag_s
        )
        live = race.at_live_position(race.original)
        if race.rt.task_id in self._races and live and awake:
            self._decide(race, race.original)

    def message(self, race: Race, copy: RaceCopy, msg: ShellMsg) -> None:
        """Apply a copy's emit, ack or fail once for the task.

        Raises:
            MultilangProtocolError: forwarding an emit failed.
        """
        rt = race.rt
        if msg.command == "emit":
            if msg.stream == BARRIER_STREAM:
                return  # epochs are held while racing
            copy.emitted += 1
            reply_to = copy.process if copy.process is not None else rt.process
            if race.owed(copy.pos) and copy.emitted > race.forwarded.get(copy.pos, 0):
                race.forwarded[copy.pos] = copy.emitted
                self._emit(rt, msg, reply_to)
            elif msg.task == 0 and msg.need_task_ids and reply_to is not None:
                reply_to.send([], urgent=True)  # the other copy's emit went out
            return
        tuple_id = msg.msg_id
        if isinstance(tuple_id, str):
            position = race.index.get(tuple_id)
            if position is not None and position >= copy.pos:
                copy.pos = position + 1
                copy.emitted = 0
            if tuple_id in rt.inputs:
                self._settle(rt, msg)

    def _decide(self, race: Race, winner: RaceCopy) -> None:
        rt = race.rt
        if winner is race.original:
            self._end(race, "original")
            return
        process, pid = winner.process, winner.pid
        if process is None or pid is None:  # pragma: no cover - up implies both
            return
        old = rt.process
        del self._races[rt.task_id]
        self._by_tag.pop(race.tag, None)
        if old is not None:
            old.kill()
        self._supervisor.adopt(rt, process, pid)
        self._adopted[race.tag] = rt.incarnation
        self._decided(race, "duplicate")

    def _end(self, race: Race, winner: str, *, why: str = "") -> None:
        """End a race keeping the original; kill the duplicate."""
        rt = race.rt
        self._races.pop(rt.task_id, None)
        self._by_tag.pop(race.tag, None)
        process = race.duplicate.process
        if process is not None:
            process.kill()
            process.join(1.0)
        if why:
            logger.warning("%s:%s: %s", rt.component.name, race.event.task, why)
        self._decided(race, winner)

    def _decided(self, race: Race, winner: str) -> None:
        event = race.event
        event.winner = winner
        event.decided_at = self._clock()
        self._settling = self._coordinator is not None
        took = event.decided_at - event.detected_at
        outcome = (
            "race aborted: a failure rolled back"
            if winner == "aborted"
            else f"the {winner} won"
        )
        logger.warning(
            "straggler %s:%s: %s after %.2f s (%s inputs replayed)",
            event.component,
            event.task,
            outcome,
            took,
            event.replayed,
        )
        self._journal.record(
            EventKind.STRAGGLER,
            event.component,
            event.task_id,
            f"straggler {outcome} after {took:.2f} s",
            winner=winner,
        )
