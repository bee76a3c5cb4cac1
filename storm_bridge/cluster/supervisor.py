"""Task lifecycles: spawn and handshake, heartbeats and timeouts, death and restart.

This is what Storm's ShellBolt/ShellSpout (``prepare``/``open``, the heartbeat
timer, ``die``) and the supervisor (relaunching a dead worker) do together, with
each task standing in for a worker: a task that exits, is SIGKILLed, stays silent
longer than ``topology.subprocess.timeout.secs`` or breaks the protocol is killed
and restarted under the same task id, and the rest of the topology keeps running.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Final

from storm_bridge.cluster.context import Router, task_context
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.flow import TupleFlow
from storm_bridge.cluster.launcher import Launcher, component_argv
from storm_bridge.cluster.process import TaskProcess
from storm_bridge.cluster.spouts import SpoutDriver
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.errors import (
    StormBridgeError,
    SubprocessTimeoutError,
    TaskExitedError,
)
from storm_bridge.messages import handshake_msg, heartbeat_msg, parse_pid_reply

__all__ = ["HEARTBEAT_PERIOD_S", "Launcher", "Supervisor", "component_argv"]

logger = logging.getLogger(__name__)

#: ShellBolt's heartbeat timer period (and ShellSpout's timeout check period).
HEARTBEAT_PERIOD_S: Final = 1.0
_REAP_WAIT_S: Final = 1.0


class Supervisor:
    """Starts, watches and restarts the task subprocesses.

    Args:
        launcher: How to start subprocesses.
        task_to_component: Every task id (the acker's included), for the context.
        timers: The cluster's timer queue.
        journal: Where events, counters and errors go.
        flow: Tuple flow (to drop what a dead task had in flight).
        router: Routing (a restarted task gets fresh groupers).
        spouts: Spout driver (a started spout gets ``activate``).
        rng: Source of heartbeat ids.
        handshake_timeout_s: Time a subprocess has to answer the handshake.
        restart_backoff_s: Delay of the second restart in a row of a task that
            never came up (answered Storm after its handshake: an ``initialize``
            that raises every time); it doubles up to ``restart_backoff_max_s``.
        restart_backoff_max_s: Upper bound of that delay.
        on_ready: Called after each completed handshake.
        on_death: Called after a task died (not after :meth:`recycle`).
    """

    def __init__(
        self,
        *,
        launcher: Launcher,
        task_to_component: Mapping[int, str],
        timers: TimerQueue,
        journal: Journal,
        flow: TupleFlow,
        router: Router,
        spouts: SpoutDriver,
        rng: random.Random,
        handshake_timeout_s: float,
        restart_backoff_s: float,
        restart_backoff_max_s: float,
        on_ready: Callable[[], None],
        on_death: Callable[[TaskRuntime], None] | None = None,
    ) -> None:
        self._launcher = launcher
        self._task_to_component = task_to_component
        self._timers = timers
        self._journal = journal
        self._flow = flow
        self._router = router
        self._spouts = spouts
        self._rng = rng
        self._handshake_timeout_s = handshake_timeout_s
        self._backoff_s = restart_backoff_s
        self._backoff_max_s = restart_backoff_max_s
        self._on_ready = on_ready
        self._on_death = on_death
        self._clock = launcher.clock

    def _record(
        self, kind: EventKind, rt: TaskRuntime, message: str, **data: object
    ) -> None:
        self._journal.record(kind, rt.component.name, rt.task_id, message, **data)

    def _every(
        self, rt: TaskRuntime, period_s: float, action: Callable[[], None]
    ) -> None:
        """Run ``action`` every ``period_s`` while this incarnation runs."""
        incarnation = rt.incarnation

        def alive() -> bool:
            return rt.incarnation == incarnation and rt.state is TaskState.RUNNING

        def fire() -> None:
            if alive():
                action()
            if alive():
                self._timers.at(self._clock() + period_s, fire)

        self._timers.at(self._clock() + period_s, fire)

    def spawn(self, rt: TaskRuntime) -> None:
        """Start a new subprocess for the task and send it the handshake."""
        rt.move(TaskState.STARTING)
        rt.incarnation += 1
        rt.reset_protocol_state()
        rt.pid = None
        rt.last_error = None
        rt.came_up = False
        process = self._launcher.process(rt)
        rt.process = process
        try:
            process.start()
        except OSError as exc:
            detail = f"cannot start {rt.component.command!r}: {exc}"
            self.die(rt, TaskExitedError(rt.component.name, rt.task_id, detail))
            return
        context = task_context(
            self._launcher.topology, rt.task_id, self._task_to_component
        )
        process.send(handshake_msg(rt.conf, str(self._launcher.pid_dir), context))
        rt.last_heard = self._clock()
        self._record(
            EventKind.TASK_STARTED, rt, f"spawned incarnation {rt.incarnation}"
        )
        incarnation = rt.incarnation

        def check_handshake() -> None:
            if rt.incarnation == incarnation and rt.state is TaskState.STARTING:
                detail = f"no handshake reply within {self._handshake_timeout_s} s"
                self.die(
                    rt, SubprocessTimeoutError(rt.component.name, rt.task_id, detail)
                )

        self._timers.at(self._clock() + self._handshake_timeout_s, check_handshake)

    def ready(self, rt: TaskRuntime, reply: object) -> None:
        """Handle the handshake reply ``{"pid": n}`` and start the task's timers.

        Raises:
            MultilangProtocolError: the reply is not a pid.
        """
        rt.pid = parse_pid_reply(reply, component=rt.component.name, task_id=rt.task_id)
        rt.move(TaskState.RUNNING)
        self._record(EventKind.TASK_READY, rt, f"pid {rt.pid}", pid=rt.pid)
        settings = rt.settings
        if rt.is_spout:
            self._every(rt, HEARTBEAT_PERIOD_S, lambda: self._check_spout(rt))
            if settings.acker_tasks > 0 and settings.message_timeouts:
                self._every(rt, settings.message_timeout_s, lambda: self._expire(rt))
            self._spouts.started(rt)
        else:
            self._every(rt, HEARTBEAT_PERIOD_S, lambda: self._heartbeat(rt))
            freq = settings.tick_freq_s
            if freq:
                self._every(rt, freq, lambda: self._flow.deliver_tick(rt, freq))
        self._on_ready()

    def start_copy(self, rt: TaskRuntime, tag: int) -> TaskProcess:
        """Start a second subprocess of a running task (a straggler's duplicate).

        Its events carry ``tag`` as their incarnation; the task's own
        subprocess and state are untouched until :meth:`adopt`.

        Raises:
            OSError: the command cannot be executed.
        """
        process = self._launcher.process(rt, tag)
        process.start()
        context = task_context(
            self._launcher.topology, rt.task_id, self._task_to_component
        )
        process.send(handshake_msg(rt.conf, str(self._launcher.pid_dir), context))
        return process

    def adopt(self, rt: TaskRuntime, process: TaskProcess, pid: int) -> None:
        """Make a copy started by :meth:`start_copy` the task's subprocess.

        The caller has killed the previous one. The task keeps its pending
        inputs (the copy was fed the same tuple ids); it gets a new
        incarnation, so the old subprocess's last events are ignored, and its
        heartbeat and tick timers start again.
        """
        rt.incarnation += 1
        process.incarnation = rt.incarnation
        rt.process = process
        rt.pid = pid
        rt.last_heard = self._clock()
        rt.heartbeats.clear()
        rt.came_up = True
        self._record(
            EventKind.TASK_READY,
            rt,
            f"pid {pid}: a duplicate took over (incarnation {rt.incarnation})",
            pid=pid,
        )
        self._every(rt, HEARTBEAT_PERIOD_S, lambda: self._heartbeat(rt))
        freq = rt.settings.tick_freq_s
        if freq:
            self._every(rt, freq, lambda: self._flow.deliver_tick(rt, freq))

    def _expire(self, rt: TaskRuntime) -> None:
        count = self._flow.expire_spout(rt)
        if count:
            limit = rt.settings.message_timeout_s
            message = f"{count} tuples timed out after {limit:g} s"
            self._record(EventKind.TUPLES_TIMED_OUT, rt, message, count=count)

    def _check_spout(self, rt: TaskRuntime) -> None:
        # ShellSpout only checks while it waits for the subprocess's sync.
        silent_s = self._clock() - rt.last_heard
        if rt.awaiting is not None and silent_s > rt.settings.subprocess_timeout_s:
            self._timeout(rt, silent_s)

    def _heartbeat(self, rt: TaskRuntime) -> None:
        silent_s = self._clock() - rt.last_heard
        if silent_s > rt.settings.subprocess_timeout_s:
            self._timeout(rt, silent_s)
        elif rt.process is not None:
            heartbeat_id = str(self._rng.getrandbits(64) - (1 << 63))
            # it jumps the queue: its answer shows the inputs already written
            # to stdin were processed only when nothing else is queued
            written = [] if rt.process.outbox_size else list(rt.inputs)
            rt.heartbeats.append(written)
            rt.process.send(heartbeat_msg(heartbeat_id), urgent=True)

    def _timeout(self, rt: TaskRuntime, silent_s: float) -> None:
        limit = rt.settings.subprocess_timeout_s
        detail = (
            f"subprocess heartbeat timeout: silent for {silent_s:.1f} s, over the "
            f"{limit:g} s of topology.subprocess.timeout.secs (when unset, "
            "supervisor.worker.timeout.secs); raise it for a task that blocks longer"
        )
        self.die(rt, SubprocessTimeoutError(rt.component.name, rt.task_id, detail))

    def die(
        self, rt: TaskRuntime, error: StormBridgeError, *, exited: bool = False
    ) -> None:
        """Kill the task's subprocess (if alive), drop its work, schedule a restart."""
        if rt.state not in (TaskState.STARTING, TaskState.RUNNING):
            return
        process = rt.process
        exit_code = None
        stderr = ""
        if process is not None:
            exit_code = process.reap(_REAP_WAIT_S) if exited else process.kill()
            stderr = process.stderr_tail()
        self._journal.errors.append(error)
        name = rt.component.name
        if rt.killed != rt.incarnation:
            rt.own_deaths += 1
            rt.down_streak += 0 if rt.came_up else 1
            rt.last_death = str(getattr(error, "detail", error))
        logger.error(
            "component %s task %s died (exit status %s): %s",
            name,
            rt.task_id,
            exit_code,
            error,
        )
        self._record(
            EventKind.TASK_DIED, rt, str(error), exit_code=exit_code, stderr=stderr
        )
        self._journal.ended_at[rt.task_id] = self._clock()
        lost = self._flow.drop_task(rt, died=True)
        if lost:
            self._record(
                EventKind.TUPLES_LOST, rt, f"{lost} pending tuples lost", count=lost
            )
        rt.move(TaskState.RESTARTING)
        rt.process = None
        rt.failures += 1
        self._journal.counters[name].restarts += 1
        self._router.reset_task(rt.task_id)
        delay = 0.0
        if rt.failures > 1:
            delay = min(self._backoff_max_s, self._backoff_s * 2 ** (rt.failures - 2))
        incarnation = rt.incarnation
        self._timers.at(self._clock() + delay, lambda: self._restart(rt, incarnation))
        if self._on_death is not None:
            self._on_death(rt)

    def recycle(self, rt: TaskRuntime) -> None:
        """Kill and restart a healthy task (a global rollback), without blame.

        Nothing is counted as an error; what it had in flight is dropped.
        """
        if rt.state not in (TaskState.STARTING, TaskState.RUNNING):
            return
        if rt.process is not None:
            rt.process.kill()
        self._record(EventKind.TASK_RECYCLED, rt, "restarted by a rollback")
        self._journal.ended_at[rt.task_id] = self._clock()
        self._flow.drop_task(rt)
        rt.move(TaskState.RESTARTING)
        rt.process = None
        self._router.reset_task(rt.task_id)
        incarnation = rt.incarnation
        self._timers.at(self._clock(), lambda: self._restart(rt, incarnation))

    def _restart(self, rt: TaskRuntime, incarnation: int) -> None:
        if rt.incarnation != incarnation or rt.state is not TaskState.RESTARTING:
            return
        start = rt.incarnation + 1
        logger.warning(
            "restarting component %s task %s (start #%s)",
            rt.component.name,
            rt.task_id,
            start,
        )
        self._record(
            EventKind.TASK_RESTARTED, rt, f"restarting (start #{start})", start=start
        )
        self.spawn(rt)

    def stop(self, tasks: Mapping[int, TaskRuntime], grace_s: float) -> None:
        """Close every subprocess's stdin, wait up to ``grace_s``, kill the rest."""
        processes = [rt.process for rt in tasks.values() if rt.process is not None]
        for rt in tasks.values():
            if rt.state is not TaskState.STOPPED:
                rt.move(TaskState.STOPPED)
            rt.process = None
        for process in processes:
            process.close_stdin()
        deadline = self._clock() + grace_s
        for process in processes:
            process.reap(max(0.0, deadline - self._clock()))
        for process in processes:
            process.join(grace_s)
