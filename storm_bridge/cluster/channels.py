"""Per-task delivery and output logs since the last committed checkpoint.

The local cluster routes every tuple, so it can keep, for each task, what a
task-scope recovery needs (see ``docs/local-recovery.md``):

* the **delivery log**: every tuple delivered to the task since the barrier its
  last committed snapshot covers, in delivery order. It is both SEEP's upstream
  backup (what the upstreams sent since that checkpoint) and Clonos's
  determinant log (the order in which the task merged its input channels, ticks
  included). A restored task is fed it again, in that order.
* the **output log**: one entry per emit the task forwarded since the same
  cut, numbered by the task's output sequence number, with its stream, its
  values (the emitted list itself, whose items the receivers' delivery logs
  share: nothing is copied or hashed while no task recovers) and the tasks it
  went to. A restored task's re-emits are matched to it by sequence number and
  suppressed (downstream tasks never see them twice); a re-emit that differs
  reveals nondeterminism.

Each log is cut at the barrier of every epoch; the cut becomes the start of
the log once that epoch commits (:meth:`TaskLog.committed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from storm_bridge.cluster.acker import PendingInput

__all__ = ["Delivery", "Output", "TaskLog", "estimate_bytes"]

#: Estimated bytes of a delivery besides its values (ids, names, list headers).
_ENTRY_OVERHEAD_BYTES: Final = 96
#: Estimated bytes of a value that is neither text nor bytes.
_SCALAR_BYTES: Final = 16


def estimate_bytes(values: Sequence[Any]) -> int:
    """A cheap estimate of a tuple's size in the log (not its encoded size)."""
    size = _ENTRY_OVERHEAD_BYTES
    for value in values:
        if isinstance(value, str | bytes):
            size += len(value) + 8
        else:
            size += _SCALAR_BYTES
    return size


class Delivery(NamedTuple):
    """One tuple delivered to a task (a named tuple: one is made per delivery).

    Attributes:
        tuple_id: Its ShellBolt-local id (kept when it is fed again).
        message: The tuple message as sent to the subprocess.
        pending: Its acker bookkeeping (anchors, ack value).
        size: Estimated bytes (:func:`estimate_bytes`).
    """

    tuple_id: str
    message: dict[str, Any]
    pending: PendingInput
    size: int


class Output(NamedTuple):
    """One emit a task forwarded (a named tuple: one is made per emit).

    Attributes:
        stream: Its stream.
        values: Its values, as emitted (not copied).
        targets: The tasks it went to (the answer to ``need_task_ids``).
    """

    stream: str
    values: Sequence[Any]
    targets: tuple[int, ...]

    def matches(self, stream: str, values: Sequence[Any]) -> bool:
        """Whether a re-emit is this emit again: same stream, same values.

        Values compare as they are written out (``repr``), so ``1``, ``1.0``
        and ``True`` differ and a NaN equals itself, as on the wire.
        """
        return stream == self.stream and repr(list(values)) == repr(list(self.values))


@dataclass
class TaskLog:
    """One task's delivery and output logs since its last committed cut.

    Attributes:
        deliveries: Tuples delivered since the cut, in order.
        outputs: Emits forwarded since the cut, by output sequence number.
        next_output: Sequence number of the task's next emit: equal to
            ``len(outputs)`` while it runs; reset to 0 by a restart, so the
            restored task's re-emits are matched with ``outputs``.
        marks: Epoch -> (deliveries, outputs) before its barrier.
        size: Estimated bytes of ``deliveries``.
    """

    deliveries: list[Delivery] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    next_output: int = 0
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)
    size: int = 0
    _input_marks: dict[int, int] = field(default_factory=dict)

    def delivered(self, delivery: Delivery) -> None:
        """Append a delivery."""
        self.deliveries.append(delivery)
        self.size += delivery.size

    def input_cut(self, epoch: int) -> None:
        """The barrier of ``epoch`` was sent to the task (a stateful bolt)."""
        self._input_marks[epoch] = len(self.deliveries)

    def output_cut(self, epoch: int) -> None:
        """The task forwarded the barrier of ``epoch``: the cut is complete.

        A task that got no barrier as a tuple (a spout, a stateless bolt) is
        cut on both logs here: every input delivered before is covered.
        """
        inputs = self._input_marks.pop(epoch, len(self.deliveries))
        self.marks[epoch] = (inputs, len(self.outputs))

    def committed(self, epoch: int) -> bool:
        """Epoch ``epoch`` committed: drop what its snapshot covers.

        Returns:
            Whether the task had a cut at that epoch (else nothing changed).
        """
        mark = self.marks.get(epoch)
        if mark is None:
            return False
        inputs, outputs = mark
        dropped = self.deliveries[:inputs]
        del self.deliveries[:inputs]
        del self.outputs[:outputs]
        self.size -= sum(d.size for d in dropped)
        self.next_output = max(0, self.next_output - outputs)
        self.marks = {
            e: (i - inputs, o - outputs)
            for e, (i, o) in self.marks.items()
            if e > epoch
        }
        self._input_marks = {
            e: i - inputs for e, i in self._input_marks.items() if e > epoch
        }
        return True

    def restarted(self) -> None:
        """The task restarts from its cut: its re-emits are matched from 0.

        Cuts of epochs that will not commit (the open epoch is abandoned) are
        dropped.
        """
        self.next_output = 0
        self.marks.clear()
        self._input_marks.clear()

    @property
    def replaying(self) -> bool:
        """Whether the task's emits still match outputs already forwarded."""
        return self.next_output < len(self.outputs)
