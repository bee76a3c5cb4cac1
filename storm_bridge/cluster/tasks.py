"""Per-task runtime state of the local cluster, and its timer queue.

A task moves through :class:`TaskState`::

    STOPPED --spawn--> STARTING --pid reply--> RUNNING
    STARTING/RUNNING --exit, timeout, protocol error--> RESTARTING --spawn--> STARTING
    any --cluster stop--> STOPPED

:meth:`TaskRuntime.move` refuses any other transition.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storm_bridge.cluster.acker import PendingInput, RotatingMap
from storm_bridge.cluster.process import TaskProcess
from storm_bridge.cluster.settings import TaskSettings
from storm_bridge.errors import ClusterStateError
from storm_bridge.messages import TICK_STREAM
from topology_api.component_specs import ComponentInfo

__all__ = ["SpoutTuple", "TaskRuntime", "TaskState", "TimerQueue"]


class TaskState(enum.Enum):
    """Lifecycle of one task (see the module docstring)."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"


_MOVES = {
    TaskState.STOPPED: {TaskState.STARTING},
    TaskState.STARTING: {TaskState.RUNNING, TaskState.RESTARTING, TaskState.STOPPED},
    TaskState.RUNNING: {TaskState.RESTARTING, TaskState.STOPPED},
    TaskState.RESTARTING: {TaskState.STARTING, TaskState.STOPPED},
}


@dataclass(frozen=True)
class SpoutTuple:
    """A reliable spout emit awaiting its tree (the spout executor's ``TupleInfo``).

    Attributes:
        msg_id: The spout's message id, handed back in ``ack``/``fail``.
        stream: Stream it was emitted on.
        values: Its values.
        emitted_at: When the spout emitted it (the clock's seconds): its tree's
            complete latency runs from here to the ack.
    """

    msg_id: Any
    stream: str
    values: list[Any]
    emitted_at: float = 0.0


@dataclass
class TaskRuntime:
    """Everything the cluster tracks about one task.

    Attributes:
        task_id: Storm task id.
        component: The component it runs.
        conf: Its effective Storm conf (sent in the handshake).
        settings: The conf values the runtime uses.
        state: Lifecycle state.
        incarnation: How many subprocesses were started for it.
        process: The current subprocess.
        pid: Pid reported in the handshake.
        last_heard: Clock reading of the last message (Storm's heartbeat stamp).
        failures: Deaths since an incarnation last came up (restart backoff).
        came_up: The current subprocess answered Storm after its handshake (a
            bolt's sync, ack, fail or emit; a spout's sync): its ``initialize``
            returned. Logs do not count, as ``initialize`` may log and then raise.
        killed: Incarnation SIGKILLed on request (``--kill``): its death is
            not the task's own.
        own_deaths: Deaths of the task's own making (exit, timeout, protocol
            error), never those on request or by a rollback.
        down_streak: Own deaths in a row of incarnations that never came up.
        last_death: What ended the last incarnation that died on its own.
        inputs: Bolts: tuples sent and not acked/failed, by ShellBolt-local id.
        heartbeats: Bolts: per heartbeat sent and not yet answered (``sync``
            replies come in order), the inputs written to stdin before it.
        leaves_ticks: Bolts: the subprocess answered a heartbeat after a tick
            it has not acked (``auto_ack = False``): it never acks ticks.
        pending: Spouts: reliable emits awaiting their tree, by root id.
        commands: Spouts: ``ack``/``fail``/``activate``/``deactivate`` to send.
        awaiting: Spouts: command sent and not yet answered by ``sync``.
        activated: Spouts: ``activate`` was queued since the last start.
        emitted_in_command: Spouts: emits since the command in flight was sent.
        empty_streak: Spouts: consecutive ``next`` calls that emitted nothing.
        dry_since: Spouts: when the first of those calls was answered.
        waiting: Spouts: what the spout said it waits for (its source down:
            not dry, whatever it emits), or None.
        at_end: Spouts: the spout said its input is at its end and emitted
            nothing since (dry without the quiet period of ``sr3.idle.quiet.s``).
        next_at: Spouts: earliest clock reading for the next ``next``.
        wake_at: Spouts: when a scheduled wake-up will pump it, if any.
        last_error: The last error the current subprocess reported (an
            ``error`` command or an ERROR log), which tells why it exits when
            its stderr is silent.
        processed: Bolts: inputs acked or failed, over every incarnation (its
            processing rate, for straggler checks).
        emits_since_ack: Bolts: emits since its last ack or fail (the outputs
            of the input it is processing, for a straggler's duplicate).
    """

    task_id: int
    component: ComponentInfo
    conf: dict[str, Any]
    settings: TaskSettings
    state: TaskState = TaskState.STOPPED
    incarnation: int = 0
    process: TaskProcess | None = None
    pid: int | None = None
    last_heard: float = 0.0
    failures: int = 0
    came_up: bool = False
    killed: int | None = None
    own_deaths: int = 0
    down_streak: int = 0
    last_death: str | None = None
    inputs: dict[str, PendingInput] = field(default_factory=dict)
    heartbeats: deque[list[str]] = field(default_factory=deque)
    leaves_ticks: bool = False
    pending: RotatingMap[int, SpoutTuple] = field(
        default_factory=lambda: RotatingMap(2)
    )
    commands: deque[tuple[str, Any]] = field(default_factory=deque)
    awaiting: str | None = None
    activated: bool = False
    emitted_in_command: int = 0
    empty_streak: int = 0
    dry_since: float | None = None
    waiting: str | None = None
    at_end: bool = False
    next_at: float = 0.0
    wake_at: float | None = None
    last_error: str | None = None
    processed: int = 0
    emits_since_ack: int = 0

    @property
    def is_spout(self) -> bool:
        """Whether the task runs a spout."""
        return self.component.kind == "spout"

    def move(self, new: TaskState) -> None:
        """Change state.

        Raises:
            ClusterStateError: the transition is not in the lifecycle.
        """
        if new not in _MOVES[self.state]:
            msg = (
                f"component {self.component.name!r} task {self.task_id}: "
                f"illegal move {self.state.value} -> {new.value}"
            )
            raise ClusterStateError(msg)
        self.state = new

    def reset_protocol_state(self) -> None:
        """Forget what the previous subprocess had in flight."""
        self.inputs.clear()
        self.heartbeats.clear()
        self.leaves_ticks = False
        self.pending.clear()
        self.commands.clear()
        self.awaiting = None
        self.activated = False
        self.emitted_in_command = 0
        self.empty_streak = 0
        self.dry_since = None
        self.waiting = None
        self.at_end = False
        self.next_at = 0.0
        self.wake_at = None
        self.emits_since_ack = 0

    def owes(self, tuple_id: str) -> bool:
        """Whether a bolt input is still to be acked or failed.

        The ticks of a bolt that never acks them are not: ShellBolt keeps
        them forever, and nothing waits on them.
        """
        pending = self.inputs.get(tuple_id)
        if pending is None:
            return False
        return not (self.leaves_ticks and pending.stream == TICK_STREAM)

    def heartbeat_answered(self) -> None:
        """A bolt's ``sync``: the inputs its heartbeat followed were processed."""
        covered = self.heartbeats.popleft() if self.heartbeats else []
        for tuple_id in covered:
            pending = self.inputs.get(tuple_id)
            if pending is not None and pending.stream == TICK_STREAM:
                self.leaves_ticks = True

    def heard_back(self) -> None:
        """Note an answer after the handshake: the subprocess came up."""
        self.came_up = True
        self.failures = 0
        self.down_streak = 0


class TimerQueue:
    """Callbacks due at clock readings, run in order by the cluster thread."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the clock reaches ``when``."""
        heapq.heappush(self._heap, (when, next(self._seq), callback))

    def next_deadline(self) -> float | None:
        """The earliest due time, or None when empty."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Callable[[], None]]:
        """Remove and return the callbacks due at ``now``, earliest first."""
        due: list[Callable[[], None]] = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[2])
        return due

    def clear(self) -> None:
        """Drop every timer."""
        self._heap.clear()
