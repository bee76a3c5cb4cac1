"""The race between a straggler and its duplicate on the local cluster.

:class:`RaceRunner` starts a duplicate of a straggling bolt task, replays it the
task's inputs since the last committed epoch, mirrors its messages and the
original's, forwards each emit and settles each input once for the task, and
decides the winner: the copy that first processed everything delivered takes
over and the other is killed. The races' state is :mod:`storm_bridge.cluster.races`';
when to start one is :class:`~storm_bridge.cluster.duplicates.Stragglers`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.cluster.races import Entry, Race, RaceCopy
from storm_bridge.cluster.rollbacks import is_stateful_bolt
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.components import BARRIER_STREAM, RESTORED_METRIC
from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import ShellMsg, parse_pid_reply, parse_shell_msg
from storm_bridge.straggler import StragglerEvent, StragglerSettings

__all__ = ["Emit", "RaceRunner", "Settle"]

logger = logging.getLogger(__name__)

#: (task, message, subprocess to answer ``need_task_ids``) -> forward an emit.
Emit = Callable[[TaskRuntime, ShellMsg, TaskProcess | None], None]
#: (task, ack or fail message) -> settle the input as the engine does.
Settle = Callable[[TaskRuntime, ShellMsg], None]


class RaceRunner:
    """Runs the races of stragglers against their duplicates (the engine thread only).

    Args:
        settings: Thresholds (``lag_s``: how long an original must keep
            answering to win).
        clock: Monotonic clock in seconds.
        journal: Where events go.
        supervisor: Starts duplicates and makes a winner the task's subprocess.
        coordinator: Global checkpoints (its open epoch is abandoned as a race
            starts).
        emit: Forwards a copy's emit as the engine forwards a bolt's.
        settle: Acks or fails an input as the engine does.
        on_decided: Called as a race ends, whoever won.
    """

    def __init__(  # noqa: PLR0913 - the engine's collaborators
        self,
        *,
        settings: StragglerSettings,
        clock: Callable[[], float],
        journal: Journal,
        supervisor: Supervisor,
        coordinator: Coordinator | None,
        emit: Emit,
        settle: Settle,
        on_decided: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._journal = journal
        self._supervisor = supervisor
        self._coordinator = coordinator
        self._emit = emit
        self._settle = settle
        self._on_decided = on_decided
        self._races: dict[int, Race] = {}
        self._by_tag: dict[int, Race] = {}
        #: Tags of duplicates that took over -> the task's incarnation then.
        self._adopted: dict[int, int] = {}
        self._tags = 0

    def racing(self) -> bool:
        """Whether a straggler and its duplicate race."""
        return bool(self._races)

    def race_of(self, task_id: int) -> Race | None:
        """The race task ``task_id`` is in, if any."""
        return self._races.get(task_id)

    def abort(self, task_id: int | None = None) -> None:
        """End the race of ``task_id`` (None: every race), keeping the originals."""
        if task_id is None:
            races = list(self._races.values())
        else:
            race = self._races.get(task_id)
            races = [] if race is None else [race]
        for race in races:
            self._end(race, "aborted")

    def start(
        self, rt: TaskRuntime, event: StragglerEvent, entries: list[Entry]
    ) -> None:
        """Start a duplicate of ``rt`` fed ``entries`` (its inputs since the commit)."""
        self._tags += 1
        tag = -self._tags
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
        if now - race.heard_at > self._settings.lag_s / 2:
            race.awake_since = now  # it woke up (again)
        race.heard_at = now
        if msg.command != "sync":
            self.message(race, race.original, msg)
        # a task slowed, not stalled, catches up whenever backpressure holds
        # the input back: it wins only once it has kept answering for
        # sr3.straggler.lag.s (a short stall), never between two stops
        awake = race.awake_since is not None and (
            now - race.awake_since >= self._settings.lag_s
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
        self._on_decided()
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
