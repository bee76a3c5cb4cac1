"""Task-scope recovery of the local cluster (``sr3.recovery.scope = task``).

When one task dies, only it restarts: it restores its own state (its owner)
from the last committed epoch, is fed its delivery log again in the logged
order (:mod:`storm_bridge.cluster.channels`), and its re-emits are matched
with the outputs it already forwarded by output sequence number and
suppressed. The other tasks keep running; tuples for the failed task are
logged while it is down and delivered after its replay. The open epoch is
abandoned and no epoch opens until every replay completed, so the restored
epoch stays the committed one. Every other case falls back to a global
rollback, and :meth:`LocalRecovery.decide` (the one decision point) says why.
Keeping the logs (cuts, trims at commits, the size bound) is its base
:class:`~storm_bridge.cluster.channel_logs.ChannelLogs`'s.
``docs/local-recovery.md`` has the design and the fallbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.channel_logs import ChannelLogs
from storm_bridge.cluster.channels import Output
from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.process import TaskProcess
from storm_bridge.cluster.rollbacks import Recovery, is_stateful_bolt
from storm_bridge.cluster.scopes import (
    RecoveryScope,
    ScopeDecision,
    Veto,
    decide_ring_scope,
    decide_scope,
)
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.messages import TICK_STREAM, ShellMsg

__all__ = ["LocalRecovery"]

logger = logging.getLogger(__name__)


@dataclass
class _Replay:
    """A task being recovered alone."""

    recovery: Recovery
    #: The task's inputs pending when it died or delivered while it was down.
    stash: dict[str, PendingInput]
    #: Tuple ids fed again and not yet acked or failed (ticks excluded).
    waiting: set[str]
    fed: bool = False


class LocalRecovery(ChannelLogs):
    """Logs every task's channels and recovers failed tasks alone.

    Args:
        scope: ``sr3.recovery.scope``.
        buffer_bytes: ``sr3.recovery.buffer.bytes`` per task.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        coordinator: The checkpoint coordinator.
        journal: Where events go.
        timers: The cluster's timer queue.
        clock: Monotonic clock in seconds.
        replay_timeout_s: A replay not complete after this long falls back to
            a global rollback (``sr3.checkpoint.timeout.s``).
    """

    def __init__(  # noqa: PLR0913 - the engine's collaborators
        self,
        *,
        scope: RecoveryScope,
        buffer_bytes: int,
        tasks: Mapping[int, TaskRuntime],
        component_tasks: Callable[[str], list[int]],
        coordinator: Coordinator,
        journal: Journal,
        timers: TimerQueue,
        clock: Callable[[], float],
        replay_timeout_s: float,
    ) -> None:
        super().__init__(
            tasks=tasks, buffer_bytes=buffer_bytes, on_full=coordinator.open_epoch
        )
        self.scope = scope
        self._component_tasks = component_tasks
        self._coordinator = coordinator
        self._journal = journal
        self._timers = timers
        self._clock = clock
        self._timeout_s = replay_timeout_s
        self._replays: dict[int, _Replay] = {}
        self._started = clock()
        #: Ring nodes that left while task scope kept the topology going.
        self.ring_nodes_left: list[dict[str, Any]] = []
        self._decisions: dict[int, ScopeDecision] = {}
        #: Other features' vetoes of task scope (live rebalance, ...).
        self.vetoes: list[Veto] = []
        self.suppressed = 0

    # -- the decision point ------------------------------------------------------------

    def decide(self, rt: TaskRuntime) -> ScopeDecision:
        """Return the scope of the recovery of ``rt``'s failure, and why.

        The one place that decides (:func:`~storm_bridge.cluster.scopes.decide_scope`
        holds the rules); other features veto task scope by adding to
        :attr:`vetoes`.
        """
        return decide_scope(
            rt,
            scope=self.scope,
            rolls_back=self._coordinator.rolls_back,
            global_restoring=self._global_restoring(),
            vetoes=self.vetoes,
        )

    def _global_restoring(self) -> bool:
        return any(
            r.scope == "global" and r.restored_at is None
            for r in self._coordinator.recoveries
        )

    # -- inputs held back, emits matched -----------------------------------------------

    def intercept(
        self,
        rt: TaskRuntime,
        tuple_id: str,
        delivery: dict[str, Any],
        pending: PendingInput,
    ) -> bool:
        """Log a tuple for a task recovered alone that is not fed yet.

        Returns:
            Whether the tuple was taken (the caller must not send it).
        """
        replay = self._replays.get(rt.task_id)
        if replay is None or replay.fed:
            return False
        replay.stash[tuple_id] = pending
        self._log(rt, tuple_id, delivery, pending)
        return True

    def emit(
        self, rt: TaskRuntime, msg: ShellMsg, reply_to: TaskProcess | None
    ) -> bool:
        """Match an emit with the task's output log.

        Returns:
            Whether the emit was already forwarded (the caller drops it).
        """
        log = self.logs[rt.task_id]
        if not log.replaying:
            return False
        logged = log.outputs[log.next_output]
        if not logged.matches(msg.stream, msg.values):
            where = f"{rt.component.name}:{self._index(rt)}"
            self._fall_back(
                rt,
                f"{where} is nondeterministic: its re-emit #{log.next_output} "
                f"{list(msg.values)!r} differs from the one forwarded before",
            )
            return True
        log.next_output += 1
        self.suppressed += 1
        if msg.task == 0 and msg.need_task_ids and reply_to is not None:
            reply_to.send(list(logged.targets), urgent=True)
        self._check_done(rt)
        return True

    def forwarded(
        self, rt: TaskRuntime, msg: ShellMsg, targets: list[int] | None
    ) -> None:
        """An emit of ``rt`` went downstream: give it the next sequence number."""
        if self.scope is RecoveryScope.GLOBAL:
            return
        log = self.logs[rt.task_id]
        log.outputs.append(Output(msg.stream, msg.values, tuple(targets or ())))
        log.next_output = len(log.outputs)

    def settled(self, rt: TaskRuntime, tuple_id: Any) -> bool:
        """A bolt acked or failed an input.

        Returns:
            Whether it was an input its previous incarnation had settled (a
            replayed one): the caller drops the ack or fail.
        """
        replay = self._replays.get(rt.task_id)
        if replay is None or not isinstance(tuple_id, str):
            return False
        replay.waiting.discard(tuple_id)
        done = tuple_id not in rt.inputs
        self._check_done(rt)
        return done

    def reset(self) -> None:
        """A global rollback: every task restarts from the committed epoch."""
        for task_id, replay in self._replays.items():
            if replay.recovery.restored_at is None:
                replay.recovery.reason += "; superseded by a global rollback"
            logger.info("task-scope recovery of task %s superseded", task_id)
        self._replays.clear()
        self._decisions.clear()
        self._restart_logs()

    # -- failures ----------------------------------------------------------------------

    def dropping(self, rt: TaskRuntime) -> bool:
        """A task died: decide the scope; under task scope keep its inputs.

        Returns:
            Whether its pending inputs are kept (their trees must not fail).
        """
        decision = self.decide(rt)
        self._decisions[rt.task_id] = decision
        if decision.scope is not RecoveryScope.TASK:
            return False
        replay = self._replays.get(rt.task_id)
        stash = dict(replay.stash) if replay is not None and not replay.fed else {}
        stash.update(rt.inputs)
        rt.inputs.clear()
        if replay is None:
            self._replays[rt.task_id] = _Replay(
                self._new_recovery(rt, decision), stash, set()
            )
        else:
            replay.recovery.cause += f", {self._cause(rt)}"
            replay.stash, replay.waiting, replay.fed = stash, set(), False
            replay.recovery.restored_at = None
        self.logs[rt.task_id].restarted()
        return True

    def task_died(self, rt: TaskRuntime) -> ScopeDecision:
        """After a death: the decision :meth:`dropping` made (global if none)."""
        decision = self._decisions.pop(rt.task_id, None) or self.decide(rt)
        if decision.scope is RecoveryScope.TASK:
            self._coordinator.abandon_open_epoch("a task recovers alone")
            deadline = self._clock() + self._timeout_s
            recovery = self._replays[rt.task_id].recovery
            self._timers.at(deadline, lambda: self._expire(rt, recovery))
        return decision

    def ring_node_left(self, node: str) -> ScopeDecision:
        """A ring node left the ring: under task scope, abandon the open epoch only.

        The decision is :func:`~storm_bridge.cluster.scopes.decide_ring_scope`'s;
        a GLOBAL one is the caller's to carry out (a rollback).
        """
        decision = decide_ring_scope(
            scope=self.scope,
            rolls_back=self._coordinator.rolls_back,
            global_restoring=self._global_restoring(),
        )
        if decision.scope is RecoveryScope.TASK:
            epoch = self._coordinator.in_flight
            self._coordinator.abandon_open_epoch(f"after ring node {node} left")
            at = round(self._clock() - self._started, 3)
            self.ring_nodes_left.append(
                {"node": node, "at_s": at, "abandoned_epoch": epoch}
            )
        return decision

    def _new_recovery(self, rt: TaskRuntime, decision: ScopeDecision) -> Recovery:
        recovery = Recovery(
            self._cause(rt),
            rt.component.name,
            self._index(rt),
            rt.task_id,
            self._clock(),
            scope=decision.scope.value,
            reason=decision.reason,
        )
        self._coordinator.recoveries.append(recovery)
        logger.warning(
            "%s died: recovering it alone (%s)", recovery.cause, decision.reason
        )
        return recovery

    def restored(self, rt: TaskRuntime, params: Any) -> bool:
        """A task reported its restore: feed it if it recovers alone.

        Returns:
            Whether it recovers alone (the coordinator is not told).
        """
        replay = self._replays.get(rt.task_id)
        if replay is None:
            return False
        report = dict(params or {})
        replay.recovery.restores[str(report.get("owner", rt.task_id))] = report
        self._feed(rt, replay)
        return True

    def task_ready(self) -> None:
        """Tasks finished their handshake: feed those recovering alone."""
        for task_id, replay in list(self._replays.items()):
            rt = self._tasks[task_id]
            if rt.state is TaskState.RUNNING and not is_stateful_bolt(rt):
                self._feed(rt, replay)

    def _feed(self, rt: TaskRuntime, replay: _Replay) -> None:
        if replay.fed or rt.process is None or rt.state is not TaskState.RUNNING:
            return
        replay.fed = True
        replay.recovery.restored_at = self._clock()
        rt.inputs.update(replay.stash)
        log = self.logs[rt.task_id]
        replay.recovery.replayed_inputs += len(log.deliveries)
        replay.recovery.outputs_to_match += len(log.outputs)
        for delivery in log.deliveries:
            if delivery.message.get("stream") != TICK_STREAM:
                replay.waiting.add(delivery.tuple_id)
            rt.process.send(delivery.message)
        self._journal.record(
            EventKind.LOG,
            rt.component.name,
            rt.task_id,
            f"fed {len(log.deliveries)} logged inputs again; "
            f"{len(log.outputs)} outputs to match",
        )
        self._check_done(rt)

    def _check_done(self, rt: TaskRuntime) -> None:
        replay = self._replays.get(rt.task_id)
        if replay is None or not replay.fed or replay.waiting:
            return
        if self.logs[rt.task_id].replaying:
            return
        del self._replays[rt.task_id]
        replay.recovery.caught_up_at = self._clock()
        logger.info("%s caught up alone", replay.recovery.cause)

    def _expire(self, rt: TaskRuntime, recovery: Recovery) -> None:
        replay = self._replays.get(rt.task_id)
        if replay is not None and replay.recovery is recovery:
            self._fall_back(
                rt, f"{recovery.cause} did not catch up in {self._timeout_s:g} s"
            )

    def _fall_back(self, rt: TaskRuntime, reason: str) -> None:
        logger.error("task-scope recovery abandoned: %s; rolling back globally", reason)
        index = self._index(rt)
        self._coordinator.rollback(
            self._cause(rt), rt.component.name, index, rt.task_id, reason=reason
        )

    def report(self) -> dict[str, Any]:
        """The run report's entry: scope, log sizes, suppressed re-emits."""
        names = {
            t: f"{rt.component.name}:{self._index(rt)}" for t, rt in self._tasks.items()
        }
        return {
            "scope": self.scope.value,
            "buffer_bytes": self.buffer_bytes,
            "peak_bytes": {names[t]: b for t, b in sorted(self.peak_bytes.items())},
            "bytes": {names[t]: log.size for t, log in sorted(self.logs.items())},
            "over_budget": self.over_budget_hits,
            "suppressed": self.suppressed,
            "ring_nodes_left": list(self.ring_nodes_left),
        }

    def holding(self) -> bool:
        """Whether a task recovers alone (no epoch opens until it caught up)."""
        return bool(self._replays)

    def recovering(self, task_id: int) -> bool:
        """Whether ``task_id`` is being recovered alone."""
        return task_id in self._replays

    def _index(self, rt: TaskRuntime) -> int:
        return self._component_tasks(rt.component.name).index(rt.task_id)

    def _cause(self, rt: TaskRuntime) -> str:
        return f"{rt.component.name}:{self._index(rt)}"
