"""Drives spout subprocesses the way ShellSpout and the spout executor do.

ShellSpout is synchronous: it sends one command (``next``, ``ack``, ``fail``,
``activate``, ``deactivate``) and reads emits and logs until ``sync``. The spout
executor acks and fails before it calls ``next``, calls ``next`` only while the
topology is active, under ``topology.max.spout.pending`` and without back
pressure, and waits a little after a ``next`` that emitted nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import spout_command_msg

__all__ = ["SpoutDriver"]

_BACKPRESSURE_RETRY_S: Final = 0.01
_FIRST_IDLE_PAUSE_S: Final = 0.001


class SpoutDriver:
    """Sends spout tasks their commands, one at a time per task.

    Args:
        clock: Monotonic clock in seconds.
        timers: Where wake-ups are scheduled.
        idle_max_s: Longest pause after ``next`` calls that emitted nothing; the
            pause doubles from 1 ms up to it (Storm sleeps 1 ms every time).
        backpressured: Whether a spout task must wait: a bolt downstream of
            it has more queued than ``topology.shellbolt.max.pending``.

    Attributes:
        active: Whether the topology is active.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        timers: TimerQueue,
        idle_max_s: float,
        backpressured: Callable[[TaskRuntime], bool],
    ) -> None:
        self._clock = clock
        self._timers = timers
        self._idle_max_s = idle_max_s
        self._backpressured = backpressured
        self.active = False

    def queue(self, rt: TaskRuntime, command: str, msg_id: Any = "") -> None:
        """Queue a command for a spout task and send it if the task is free."""
        rt.commands.append((command, msg_id))
        self.pump(rt)

    def set_active(self, active: bool, spouts: Iterable[TaskRuntime]) -> None:
        """Activate or deactivate the topology, telling every running spout."""
        self.active = active
        for rt in spouts:
            if rt.state is TaskState.RUNNING and rt.activated != active:
                rt.activated = active
                self.queue(rt, "activate" if active else "deactivate")

    def started(self, rt: TaskRuntime) -> None:
        """A spout task completed its handshake: activate it if the topology is."""
        if self.active:
            rt.activated = True
            self.queue(rt, "activate")

    def _wake(self, rt: TaskRuntime, when: float) -> None:
        if rt.wake_at is not None and rt.wake_at <= when:
            return
        rt.wake_at = when
        incarnation = rt.incarnation

        def wake() -> None:
            if rt.incarnation == incarnation and rt.wake_at == when:
                rt.wake_at = None
                self.pump(rt)

        self._timers.at(when, wake)

    def pump(self, rt: TaskRuntime) -> None:
        """Send the task its next command, if it is free and one is due."""
        if rt.state is not TaskState.RUNNING or rt.awaiting is not None:
            return
        if rt.process is None:
            return
        if rt.commands:
            command, msg_id = rt.commands.popleft()
        else:
            limit = rt.settings.max_spout_pending
            if not (self.active and rt.activated):
                return
            if limit is not None and len(rt.pending) >= limit:
                return  # pumped again when an ack or fail frees a slot
            now = self._clock()
            if self._backpressured(rt):
                self._wake(rt, now + _BACKPRESSURE_RETRY_S)
                return
            if now < rt.next_at:
                self._wake(rt, rt.next_at)
                return
            command, msg_id = "next", ""
            rt.emitted_in_command = 0
        rt.awaiting = command
        rt.last_heard = self._clock()  # ShellSpout's markWaitingSubprocess
        rt.process.send(spout_command_msg(command, msg_id))

    def source_waiting(self, rt: TaskRuntime, params: Any) -> None:
        """Handle a spout's ``sr3.waiting`` metric: it waits for its source, or not.

        A spout that stops waiting starts its dry spell over: the quiet period
        of ``sr3.idle.quiet.s`` counts from its next empty ``next``.
        """
        reason = params.get("reason") if isinstance(params, dict) else None
        was, rt.waiting = rt.waiting, None if reason is None else str(reason)
        if was is not None and rt.waiting is None:
            rt.empty_streak = 0
            rt.dry_since = None

    def input_ended(self, rt: TaskRuntime, params: Any) -> None:
        """Handle a spout's ``sr3.input.end`` metric: its input is at its end.

        Dry without the quiet period of ``sr3.idle.quiet.s`` until it emits
        again (:class:`Dispatcher` clears it on an emit).
        """
        rt.at_end = isinstance(params, dict) and params.get("end") is True

    def synced(self, rt: TaskRuntime) -> None:
        """Handle a spout's ``sync``: the command in flight is done.

        Raises:
            MultilangProtocolError: no command was in flight.
        """
        if rt.awaiting is None:
            detail = "sent sync while no command was pending"
            raise MultilangProtocolError(rt.component.name, rt.task_id, detail)
        if rt.awaiting == "next":
            if rt.emitted_in_command:
                rt.empty_streak = 0
                rt.dry_since = None
                rt.next_at = self._clock()
            else:
                rt.empty_streak += 1
                if rt.dry_since is None:
                    rt.dry_since = self._clock()
                doublings = min(rt.empty_streak - 1, 30)
                pause = min(self._idle_max_s, _FIRST_IDLE_PAUSE_S * 2**doublings)
                rt.next_at = self._clock() + pause
        rt.awaiting = None
        self.pump(rt)
