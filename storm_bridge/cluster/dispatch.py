"""What task subprocesses say, applied to the engine (ShellBolt/ShellSpout reads).

:class:`Dispatcher` takes each :class:`ProcessEvent` the subprocess readers
decoded (a handshake reply, a multilang command, an error, end of file) and
applies it to the :class:`~storm_bridge.cluster.engine.Engine`'s parts: the
supervisor (handshakes, deaths), the tuple flow (emits, acks, fails), the
checkpoint coordinator (barriers, restores, snapshots), task-scope recovery and
the straggler policy. It also holds the replay of a tuple a stateful bolt
failed, with its poison-tuple limit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.events import EventKind
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.cluster.tasks import TaskRuntime, TaskState
from storm_bridge.components import (
    BARRIER_STREAM,
    LOADED_METRIC,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
)
from storm_bridge.errors import MultilangProtocolError, TaskExitedError
from storm_bridge.messages import (
    LOG_LEVELS,
    SYSTEM_COMPONENT,
    ShellMsg,
    parse_shell_msg,
)
from storm_bridge.native import MAX_REPLAYS
from topology_api.barriers import (
    END_OF_INPUT_METRIC,
    KEY_GROUPS_METRIC,
    WAITING_METRIC,
)

if TYPE_CHECKING:
    from storm_bridge.cluster.engine import Engine

__all__ = ["Dispatcher"]

logger = logging.getLogger(__name__)
task_logger = logging.getLogger("storm_bridge.tasks")

_REAP_WAIT_S: Final = 1.0
#: Distinct failed tuples whose replays are counted (for the poison limit).
_FAILED_TUPLES_KEPT: Final = 10_000
_PY_LEVELS: Final = {
    0: 5,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}
_COMMON_COMMANDS: Final = frozenset({"log", "error", "metrics"})
#: A racing straggler's commands that go through its race.
_RACED_COMMANDS: Final = frozenset({"emit", "ack", "fail", "sync"})


def _last_line(text: str) -> str:
    """The last non-blank line of a reported error (a traceback's exception)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Dispatcher:
    """Applies subprocess events to an engine's parts (not thread-safe).

    It reads the engine's parts when an event comes, not when it is built:
    the engine creates it before its straggler policy and task-scope recovery.

    Args:
        engine: The engine whose tasks send the events.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: (component, repr(values)) -> failures of a tuple by stateful bolts.
        self._failed_tuples: dict[tuple[str, str], int] = {}

    def handle(self, event: ProcessEvent) -> None:
        """Apply one event from a subprocess reader."""
        if event.incarnation < 0:
            # a straggler's duplicate (its own event, or the task's once it won)
            mine = self._engine.stragglers.copy_event(event)
            if mine is None:
                return
            event = mine
        rt = self._engine.tasks.get(event.task_id)
        if rt is None or event.incarnation != rt.incarnation:
            return
        if rt.state not in (TaskState.STARTING, TaskState.RUNNING):
            return
        if event.kind == "eof":
            code = last = None
            if rt.process is not None:
                code = rt.process.reap(_REAP_WAIT_S)
                last = rt.process.last_stderr_line(_REAP_WAIT_S)
            # the last stderr line of a Python task is its uncaught exception;
            # pystorm's run loop logs and reports it to the cluster instead
            if not last and rt.last_error:
                last = _last_line(rt.last_error)
            detail = f"subprocess exited with status {code}" + (
                f": {last}" if last else ""
            )
            error = TaskExitedError(rt.component.name, rt.task_id, detail)
            self._engine.supervisor.die(rt, error, exited=True)
            return
        try:
            if event.kind == "error":
                raise event.payload
            rt.last_heard = event.at
            if rt.state is TaskState.STARTING:
                self._engine.supervisor.ready(rt, event.payload)
                return
            msg = parse_shell_msg(
                event.payload, component=rt.component.name, task_id=rt.task_id
            )
            if msg.command in _COMMON_COMMANDS:
                self._common(rt, msg)
            elif rt.is_spout:
                self._spout_message(rt, msg)
            else:
                self._bolt_message(rt, msg)
        except MultilangProtocolError as exc:
            self._engine.journal.counters[rt.component.name].errors += 1
            self._record(EventKind.PROTOCOL_ERROR, rt, exc.detail)
            self._engine.supervisor.die(rt, exc)

    def _record(self, kind: EventKind, rt: TaskRuntime, text: str, **data: Any) -> None:
        self._engine.journal.record(kind, rt.component.name, rt.task_id, text, **data)

    def _common(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        name, task, text = rt.component.name, rt.task_id, msg.msg or ""
        if msg.command == "log":
            level = _PY_LEVELS.get(msg.level, logging.INFO)
            if level >= logging.ERROR:
                # pystorm logs an exception that ends its run loop at ERROR
                rt.last_error = text
            task_logger.log(level, "component %s task %s: %s", name, task, text)
            self._record(
                EventKind.LOG, rt, text, level=LOG_LEVELS.get(msg.level, "INFO")
            )
        elif msg.command == "error":
            rt.last_error = text
            self._engine.journal.counters[name].errors += 1
            task_logger.error("component %s task %s reported: %s", name, task, text)
            self._record(EventKind.COMPONENT_ERROR, rt, text)
        else:
            metric, params = msg.metric_name or "", msg.metric_params
            coordinator, local = self._engine.coordinator, self._engine.local
            if metric == WAITING_METRIC and rt.is_spout:
                self._engine.spouts.source_waiting(rt, params)
            elif metric == END_OF_INPUT_METRIC and rt.is_spout:
                self._engine.spouts.input_ended(rt, params)
            elif coordinator is not None:
                if metric == RESTORED_METRIC:
                    if local is None or not local.restored(rt, params):
                        coordinator.restored(rt, params)
                elif metric == SNAPSHOT_METRIC:
                    coordinator.snapshot_written(rt, params)
                elif metric == LOADED_METRIC:
                    coordinator.restore_progress(rt, params)
                elif metric == KEY_GROUPS_METRIC and coordinator.on_key_groups:
                    coordinator.on_key_groups(rt, params)
            task_logger.debug(
                "component %s task %s metric %s: %r", name, task, metric, params
            )
            self._record(EventKind.METRICS, rt, metric, params=params)

    def _bolt_message(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        rt.heard_back()
        barrier = msg.command == "emit" and msg.stream == BARRIER_STREAM
        race = self._engine.stragglers.race_of(rt)
        if race is not None and msg.command in _RACED_COMMANDS and not barrier:
            if msg.command == "sync":
                self._synced(rt)
            self._engine.stragglers.original_message(race, msg)
        elif barrier:
            if self._engine.coordinator is not None:
                self._engine.coordinator.bolt_barrier(rt, list(msg.values))
        elif msg.command == "emit":
            self.forward_emit(rt, msg, rt.process)
        elif msg.command in ("ack", "fail"):
            self.settle(rt, msg)
        elif msg.command == "sync":
            self._synced(rt)
        elif self._engine.options.strict_commands:
            raise MultilangProtocolError(
                rt.component.name,
                rt.task_id,
                f"Unknown command received: {msg.command!r}",
            )

    def forward_emit(
        self, rt: TaskRuntime, msg: ShellMsg, reply_to: TaskProcess | None
    ) -> None:
        """Route a bolt's emit; answer ``need_task_ids`` to ``reply_to``."""
        local = self._engine.local
        if local is not None and local.emit(rt, msg, reply_to):
            return  # forwarded before the task failed
        task_ids = self._engine.flow.bolt_emit(rt, msg)
        if local is not None:
            local.forwarded(rt, msg, task_ids)
        self._engine.outputs.add(rt.component.name, msg.stream, msg.values)
        if task_ids is not None and reply_to is not None:
            reply_to.send(task_ids, urgent=True)

    def settle(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        """Ack or fail a bolt's input (a failed stateful input rolls back)."""
        local = self._engine.local
        if local is not None and local.settled(rt, msg.msg_id):
            return  # settled by the task's previous incarnation
        if msg.command == "ack":
            self._engine.flow.bolt_ack(rt, msg)
            return
        failed = rt.inputs.get(msg.msg_id) if isinstance(msg.msg_id, str) else None
        self._engine.flow.bolt_fail(rt, msg)
        if failed is not None:
            self._replay_failed(rt, failed)

    def _synced(self, rt: TaskRuntime) -> None:
        rt.heartbeat_answered()
        if self._engine.flow.on_input_done is not None:
            # a tick it never acks may be all a barrier waited for
            self._engine.flow.on_input_done(rt)

    def _replay_failed(self, rt: TaskRuntime, failed: PendingInput) -> None:
        """Replay a tuple a stateful bolt failed (raised on) by a rollback.

        Local checkpoints only: replayable spouts emit without message ids
        there, so the tree of a failed tuple does not fail back to a spout to
        be replayed, as on Storm; the last committed epoch is restored and
        replayed instead. A tuple failed more than :data:`MAX_REPLAYS` times
        (a poison tuple) is dropped, as native mode drops it. A tuple of a
        reliable plain spout fails back to it as on Storm.
        """
        coordinator = self._engine.coordinator
        if coordinator is None or not rt.component.stateful or failed.anchors:
            return
        if failed.source == SYSTEM_COMPONENT or not coordinator.rolls_back:
            return
        name = rt.component.name
        mark = (name, repr(failed.values))
        count = self._failed_tuples.pop(mark, 0) + 1
        self._failed_tuples[mark] = count  # newest last
        if len(self._failed_tuples) > _FAILED_TUPLES_KEPT:
            # forget the tuple failed longest ago: a long run of distinct bad
            # tuples must not grow the engine without bound
            del self._failed_tuples[next(iter(self._failed_tuples))]
        if count > MAX_REPLAYS:
            logger.error(
                "component %s failed %r %s times (a poison tuple): dropped",
                name,
                failed.values,
                count,
            )
            return
        index = self._engine.router.component_tasks(name).index(rt.task_id)
        cause = f"{name}:{index} failed a tuple"
        coordinator.rollback(cause, name, index, rt.task_id)

    def _spout_message(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        if msg.command == "sync":
            rt.heard_back()
            if self._engine.coordinator is not None:
                self._engine.coordinator.spout_synced(rt)
            self._engine.spouts.synced(rt)
        elif msg.command == "emit" and msg.stream == BARRIER_STREAM:
            if self._engine.coordinator is not None:
                self._engine.coordinator.spout_barrier(rt, list(msg.values))
        elif msg.command == "emit":
            rt.at_end = False  # an emit after the end of input: a replay
            local = self._engine.local
            if local is not None and local.emit(rt, msg, rt.process):
                rt.emitted_in_command += 1
                return  # forwarded before the spout failed
            task_ids = self._engine.flow.spout_emit(rt, msg)
            if local is not None:
                local.forwarded(rt, msg, task_ids)
            self._engine.outputs.add(rt.component.name, msg.stream, msg.values)
            if task_ids is not None and rt.process is not None:
                rt.process.send(task_ids, urgent=True)
        else:
            raise MultilangProtocolError(
                rt.component.name,
                rt.task_id,
                f"Unknown command received: {msg.command!r}",
            )
