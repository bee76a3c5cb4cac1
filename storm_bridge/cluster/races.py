"""A straggler's race: the input log it replays, its two copies, deduplication.

The :class:`InputLog` keeps each bolt task's input since the last committed
epoch (the cluster routes every tuple: the upstream buffer). A :class:`Race`
holds a straggler's input since then plus the live input, and where each of
its two copies (:class:`RaceCopy`) is in it: an emit is forwarded once per
position, an input settled once. :mod:`storm_bridge.cluster.race_runner` runs
the races.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storm_bridge.cluster.process import TaskProcess
from storm_bridge.cluster.rollbacks import is_stateful_bolt
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.straggler import StragglerEvent

__all__ = ["Entry", "InputLog", "Race", "RaceCopy"]

#: (tuple id, the tuple message as sent to the task).
Entry = tuple[str, dict[str, Any]]


class InputLog:
    """Each bolt task's inputs since the last committed epoch, in delivery order.

    A stateful task's log is cut at the barrier of each committed epoch (what
    its snapshot of that epoch covers); a stateless task's at its first input
    still pending (it has no state: only what it owes matters).
    """

    def __init__(self, tasks: Mapping[int, TaskRuntime]) -> None:
        self._tasks = tasks
        self._entries: dict[int, list[Entry]] = {}
        self._marks: dict[int, dict[int, int]] = {}

    def delivered(
        self, rt: TaskRuntime, tuple_id: str, message: dict[str, Any]
    ) -> None:
        """A tuple was sent to ``rt``."""
        self._entries.setdefault(rt.task_id, []).append((tuple_id, message))

    def barrier(self, rt: TaskRuntime, epoch: int) -> None:
        """The barrier of ``epoch`` was sent to stateful task ``rt``."""
        size = len(self._entries.get(rt.task_id, ()))
        self._marks.setdefault(rt.task_id, {})[epoch] = size

    def committed(self, epoch: int) -> None:
        """Epoch ``epoch`` committed: forget what its snapshots cover."""
        for task_id, entries in self._entries.items():
            rt = self._tasks[task_id]
            marks = self._marks.get(task_id, {})
            if is_stateful_bolt(rt):
                cut = marks.get(epoch)
                if cut is None:
                    continue
            else:
                cut = next(
                    (i for i, (t, _) in enumerate(entries) if t in rt.inputs),
                    len(entries),
                )
            del entries[:cut]
            self._marks[task_id] = {e: i - cut for e, i in marks.items() if e > epoch}

    def since_commit(self, rt: TaskRuntime) -> list[Entry]:
        """The inputs of ``rt`` its duplicate must process (see the class doc)."""
        entries = self._entries.get(rt.task_id, [])
        if is_stateful_bolt(rt):
            return list(entries)
        return [(t, m) for t, m in entries if t in rt.inputs]

    def forget(self, task_id: int | None = None) -> None:
        """Drop one task's log (it restarted) or every log (a rollback)."""
        if task_id is None:
            self._entries.clear()
            self._marks.clear()
        else:
            self._entries.pop(task_id, None)
            self._marks.pop(task_id, None)

    def size(self) -> int:
        """Inputs held, over every task."""
        return sum(len(e) for e in self._entries.values())


@dataclass
class RaceCopy:
    """One of the two copies of a racing task.

    Attributes:
        name: ``original`` or ``duplicate``.
        pos: Position (in the race's input) of the input it is processing.
        emitted: Emits it made while processing that input.
        process: The duplicate's subprocess (None: the task's own).
        pid: The duplicate's pid, once it answered the handshake.
        up: The duplicate restored its state and may win.
    """

    name: str
    pos: int
    emitted: int = 0
    process: TaskProcess | None = None
    pid: int | None = None
    up: bool = False


@dataclass
class Race:
    """A straggler and its duplicate processing the same input.

    Attributes:
        rt: The task.
        event: Its report entry.
        tag: Incarnation tag of the duplicate's events (negative).
        entries: The task's input since the last committed epoch, then live.
        index: Position of each tuple id in ``entries``.
        forwarded: Emits sent downstream per position.
        heard_at: When the original last said anything.
        awake_since: Since when the original has answered without a gap of
            half ``sr3.straggler.lag.s`` (None: not since the detection).
        original: The task's own subprocess.
        duplicate: The copy.
    """

    rt: TaskRuntime
    event: StragglerEvent
    tag: int
    entries: list[Entry]
    original: RaceCopy
    duplicate: RaceCopy
    index: dict[str, int] = field(default_factory=dict)
    forwarded: dict[int, int] = field(default_factory=dict)
    heard_at: float = 0.0
    awake_since: float | None = None

    def add(self, tuple_id: str, message: dict[str, Any]) -> None:
        """A live input: the original got it; the duplicate gets it too."""
        self.index[tuple_id] = len(self.entries)
        self.entries.append((tuple_id, message))
        if self.duplicate.process is not None:
            self.duplicate.process.send(message)

    def owed(self, position: int) -> bool:
        """Whether the input at ``position`` is still to be acked or failed.

        Once one copy acked it, that copy emitted all of its outputs: the
        other's are duplicates, whatever their count.
        """
        if position >= len(self.entries):
            return True  # an emit before any input (an initialize that emits)
        return self.entries[position][0] in self.rt.inputs

    def at_live_position(self, copy: RaceCopy) -> bool:
        """Whether ``copy`` processed everything delivered to the task."""
        ready = copy is self.original or copy.up
        return ready and copy.pos >= len(self.entries)
