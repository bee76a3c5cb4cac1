"""Every task's channel logs for task-scope recovery, bounded in size.

:class:`ChannelLogs` keeps one :class:`~storm_bridge.cluster.channels.TaskLog`
per task: it logs each delivery, cuts the logs at every epoch's barriers, trims
them when an epoch commits, starts them again after a global rollback or a
rebalance, and watches ``sr3.recovery.buffer.bytes`` (a log over it asks for an
epoch, whose commit trims it, and backpressures the spouts). What is done with
the logs when a task fails is
:class:`~storm_bridge.cluster.local_recovery.LocalRecovery`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.channels import Delivery, TaskLog, estimate_bytes
from storm_bridge.cluster.tasks import TaskRuntime

__all__ = ["ChannelLogs"]


class ChannelLogs:
    """The delivery and output logs of every task (a base of ``LocalRecovery``).

    Args:
        tasks: Task runtimes by id.
        buffer_bytes: ``sr3.recovery.buffer.bytes`` per task.
        on_full: Called on each delivery that finds a log over the bound.

    Attributes:
        buffer_bytes: The bound of a task's log (estimated bytes).
        logs: Each task's log, by task id.
        peak_bytes: The largest log seen, per task (estimated bytes), for the
            report.
        over_budget_hits: Deliveries that found a log over the bound
            (backpressure, a forced epoch).
    """

    def __init__(
        self,
        *,
        tasks: Mapping[int, TaskRuntime],
        buffer_bytes: int,
        on_full: Callable[[], Any],
    ) -> None:
        self.buffer_bytes = buffer_bytes
        self._tasks = tasks
        self._on_full = on_full
        self.logs: dict[int, TaskLog] = {t: TaskLog() for t in tasks}
        self.peak_bytes: dict[int, int] = dict.fromkeys(tasks, 0)
        self.over_budget_hits = 0
        #: Tasks whose log is over the bound: asked before every spout ``next``,
        #: so kept as logs grow and trim instead of scanning every log.
        self._over: set[int] = set()

    def delivered(
        self, rt: TaskRuntime, tuple_id: str, message: dict[str, Any]
    ) -> None:
        """A tuple was sent to a bolt task: log it."""
        self._log(rt, tuple_id, message, rt.inputs[tuple_id])

    def _log(
        self,
        rt: TaskRuntime,
        tuple_id: str,
        message: dict[str, Any],
        pending: PendingInput,
    ) -> None:
        task_id = rt.task_id
        log = self.logs[task_id]
        log.delivered(
            Delivery(
                tuple_id, message, pending, estimate_bytes(message.get("tuple") or ())
            )
        )
        size = log.size
        if size > self.peak_bytes[task_id]:
            self.peak_bytes[task_id] = size
        if size > self.buffer_bytes:
            self._over.add(task_id)
            self.over_budget_hits += 1
            self._on_full()  # a commit trims the logs

    def over_budget(self) -> bool:
        """Whether a task's log is over ``sr3.recovery.buffer.bytes`` (backpressure)."""
        return bool(self._over)

    def _measure(self) -> None:
        """Find the logs over the bound again (after logs were trimmed or replaced)."""
        self._over = {t for t, log in self.logs.items() if log.size > self.buffer_bytes}

    # -- cuts and commits --------------------------------------------------------------

    def input_cut(self, rt: TaskRuntime, epoch: int) -> None:
        """The barrier of ``epoch`` was sent to stateful task ``rt``."""
        self.logs[rt.task_id].input_cut(epoch)

    def output_cut(self, rt: TaskRuntime, epoch: int) -> None:
        """``rt``'s barrier of ``epoch`` was forwarded downstream."""
        self.logs[rt.task_id].output_cut(epoch)

    def committed(self, epoch: int) -> None:
        """Epoch ``epoch`` committed: trim every log to its cut."""
        for log in self.logs.values():
            log.committed(epoch)
        self._measure()

    def _restart_logs(self) -> None:
        """A global rollback: every task's log starts again, empty."""
        self.logs = {t: TaskLog() for t in self._tasks}
        self._over.clear()

    def retask(self, task_ids: Iterable[int]) -> None:
        """A rebalance switched these tasks at a commit: they start with empty logs.

        Logs of tasks no longer in the topology (retired) are dropped.
        """
        for gone in [t for t in self.logs if t not in self._tasks]:
            del self.logs[gone]
            self.peak_bytes.pop(gone, None)
        for task_id in task_ids:
            if task_id in self._tasks:
                self.logs[task_id] = TaskLog()
                self.peak_bytes.setdefault(task_id, 0)
        self._measure()
