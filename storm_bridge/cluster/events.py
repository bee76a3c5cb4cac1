"""What the local cluster records: an event log and per-component counters."""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from sr3.latency import LatencySample
from storm_bridge.errors import StormBridgeError

__all__ = ["ClusterEvent", "ComponentCounters", "EventKind", "EventLog", "Journal"]


class EventKind(enum.Enum):
    """Kinds of :class:`ClusterEvent`."""

    TASK_STARTED = "task_started"
    """A subprocess was spawned (first start or restart)."""
    TASK_READY = "task_ready"
    """A subprocess answered the handshake with its pid."""
    TASK_DIED = "task_died"
    """A subprocess exited, timed out or broke the protocol, and was killed."""
    TASK_RESTARTED = "task_restarted"
    """A dead task got a new subprocess."""
    TASK_RECYCLED = "task_recycled"
    """A healthy task was killed and restarted by a global rollback."""
    CHECKPOINT = "checkpoint"
    """An epoch committed (every spout and stateful task reported)."""
    PROTOCOL_ERROR = "protocol_error"
    """A subprocess broke the multilang protocol (the task is then restarted)."""
    COMPONENT_ERROR = "component_error"
    """A subprocess sent an ``error`` command (``reportError``)."""
    LOG = "log"
    """A subprocess sent a ``log`` command."""
    METRICS = "metrics"
    """A subprocess sent a ``metrics`` command."""
    TUPLES_TIMED_OUT = "tuples_timed_out"
    """Spout tuples reached the message timeout and were failed back."""
    TUPLES_LOST = "tuples_lost"
    """Tuples pending on a dead task were failed back to their spouts."""
    ACTIVATED = "activated"
    """The topology became active (spouts get ``activate``)."""
    DEACTIVATED = "deactivated"
    """The topology became inactive (spouts get ``deactivate``)."""
    STRAGGLER = "straggler"
    """A task fell behind its peers; the straggler policy acted (or decided)."""


@dataclass(frozen=True)
class ClusterEvent:
    """One entry of the event log.

    Attributes:
        at: ``time.monotonic()`` (or the injected clock) when it happened.
        kind: What happened.
        component: Component id ("" for topology-wide events).
        task_id: Task id (0 for topology-wide events).
        message: Human-readable detail.
        data: Structured detail (exit codes, counts, log levels).
    """

    at: float
    kind: EventKind
    component: str
    task_id: int
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ComponentCounters:
    """Counters of one component, summed over its tasks.

    Attributes:
        emitted: ``emit`` commands.
        transferred: Tuples delivered to tasks by those emits.
        acked: Spouts: tuple trees completed. Bolts: ``ack`` commands.
        failed: Spouts: tuple trees failed (explicitly or by timeout). Bolts:
            ``fail`` commands.
        timed_out: Spouts: tuple trees failed by the message timeout.
        errors: ``error`` commands and protocol errors.
        restarts: Subprocess restarts.
    """

    emitted: int = 0
    transferred: int = 0
    acked: int = 0
    failed: int = 0
    timed_out: int = 0
    errors: int = 0
    restarts: int = 0

    def copy(self) -> ComponentCounters:
        """Return a snapshot."""
        return replace(self)


#: Events a task sends as often as it likes: they get a bound of their own, so
#: a chatty task never pushes task deaths or reported errors out of the log.
_CHATTY: Final = frozenset({EventKind.LOG, EventKind.METRICS})


class EventLog:
    """A bounded, append-only list of :class:`ClusterEvent` (not thread-safe).

    ``log`` and ``metrics`` events and all the others are bounded apart, each
    to ``max_events``.
    """

    def __init__(self, max_events: int) -> None:
        self._events: deque[ClusterEvent] = deque(maxlen=max_events)
        self._chatty: deque[ClusterEvent] = deque(maxlen=max_events)

    def add(self, event: ClusterEvent) -> None:
        """Append an event (dropping the oldest of its kind beyond the bound)."""
        (self._chatty if event.kind in _CHATTY else self._events).append(event)

    def select(
        self, kind: EventKind | None = None, component: str | None = None
    ) -> list[ClusterEvent]:
        """Return the events, oldest first, optionally of one kind and component."""
        if kind is None:
            events: Iterable[ClusterEvent] = heapq.merge(
                self._events, self._chatty, key=lambda e: e.at
            )
        else:
            events = self._chatty if kind in _CHATTY else self._events
        return [
            e
            for e in events
            if (kind is None or e.kind is kind)
            and (component is None or e.component == component)
        ]


class Journal:
    """What the cluster records: the event log, counters and task-killing errors.

    Args:
        components: Component ids (one counter set each).
        clock: Clock stamping the events.
        max_events: Bound of the event log.

    Attributes:
        events: The event log.
        counters: Counters by component id.
        errors: Errors that killed tasks, oldest first.
        latencies: Complete latency of acked tuple trees, by spout component.
        complete_latency: The same over every spout.
        ended_at: Task id -> when its last subprocess ended (died or was
            restarted by a rollback); kept apart from the bounded event log,
            which a chatty task's logs can overflow.
    """

    def __init__(
        self, components: Iterable[str], clock: Callable[[], float], max_events: int
    ) -> None:
        self._clock = clock
        self.events = EventLog(max_events)
        self.counters = {name: ComponentCounters() for name in components}
        self.latencies: dict[str, LatencySample] = {}
        self.complete_latency = LatencySample()
        self.errors: list[StormBridgeError] = []
        self.ended_at: dict[int, float] = {}

    def tree_acked(self, spout: str, ms: float) -> None:
        """Record the complete latency of a tuple tree of ``spout``, in ms."""
        self.latencies.setdefault(spout, LatencySample()).add(ms)
        self.complete_latency.add(ms)

    def record(
        self, kind: EventKind, component: str, task_id: int, message: str, **data: Any
    ) -> None:
        """Append an event stamped with the current clock reading."""
        event = ClusterEvent(self._clock(), kind, component, task_id, message, data)
        self.events.add(event)
