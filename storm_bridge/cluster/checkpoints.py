"""Global checkpoints of the local cluster: epochs, aligned barriers, rollback.

The coordinator opens epoch ``e`` every ``sr3.checkpoint.interval.s`` once the
previous one committed. Each replayable spout task gets a barrier command and
emits a barrier (its offset inside) on :data:`BARRIER_STREAM`; a plain spout's
barrier is injected between two of its commands. A barrier goes to every task
of every downstream component (ALL grouping). Each bolt task aligns: once the
barrier of a channel (upstream task) arrived, later tuples of that channel are
held back until every channel delivered its barrier. Then:

* a stateful task gets the barrier as a tuple; it captures its keyed state and
  emits the barrier on (forwarded downstream at once), then writes the snapshot
  to the ring in the background and reports it (``sr3.snapshot`` metric);
* a stateless task forwards the barrier once every input it had before the
  alignment is acked or failed (its outputs for them were emitted before);
  until then its later tuples stay held, so a bolt that combines inputs (a
  ``BatchingBolt``) never folds tuples of the next epoch into this one's
  output. A bolt that acks an input only once later ones arrive holds the
  epoch back until ``sr3.checkpoint.timeout.s`` abandons it.

Epoch ``e`` commits (``CheckpointHooks.commit``) when every spout task and every
stateful task reported. Any task death rolls the whole topology back: every
task restarts, stateful tasks restore the committed epoch's state, replayable
spouts seek to its offsets, and tuples in flight are lost. Plain spouts keep
running: the trees of their lost tuples fail back to them, as in Storm.
Barriers never travel on a subscription that closes a cycle (see
:func:`~storm_bridge.cluster.context.back_edges`),
so a bolt reading its own output back never waits for itself. A
topology with neither stateful bolts nor replayable spouts has nothing to roll
back: a task death only abandons the open epoch and, as in Storm, only the dead
task restarts (the trees of its lost tuples fail back to their spouts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sr3.errors import ConfigError
from storm_bridge.cluster.context import back_edges
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import BARRIER_COMMAND, BARRIER_STREAM
from storm_bridge.errors import StormBridgeError
from storm_bridge.messages import SYSTEM_TASK_ID, bolt_tuple_msg
from storm_bridge.topology import LoadedTopology

__all__ = [
    "BARRIER_SOURCE",
    "CheckpointHooks",
    "CheckpointSettings",
    "Coordinator",
    "EpochStats",
    "Recovery",
]

logger = logging.getLogger(__name__)

#: Component id barrier tuples carry when the cluster delivers them to a task.
BARRIER_SOURCE = "__sr3"


class CheckpointHooks(Protocol):
    """Where the coordinator records commits (ZooKeeper in production)."""

    def commit(self, epoch: int, offsets: Mapping[str, Any], owners: list[str]) -> None:
        """Record epoch ``epoch`` as globally committed."""


@dataclass(frozen=True)
class CheckpointSettings:
    """How the cluster checkpoints.

    Attributes:
        hooks: Records commits.
        interval_s: Time between the commit of an epoch and the opening of the
            next (``sr3.checkpoint.interval.s``, default 1).
        first_epoch: Number of the first epoch this run opens; keep it above
            every epoch published before.
        timeout_s: An epoch still open after this long is abandoned (held
            tuples are released) and a later one opened
            (``sr3.checkpoint.timeout.s``, default 60).

    Raises:
        ConfigError: a duration is not positive or the first epoch is below 1.
    """

    hooks: CheckpointHooks
    interval_s: float = 1.0
    first_epoch: int = 1
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        checks = {
            "sr3.checkpoint.interval.s": self.interval_s > 0,
            "sr3.checkpoint.timeout.s": self.timeout_s > 0,
        }
        for key, ok in checks.items():
            if not ok:
                msg = f"{key} must be > 0 seconds; use e.g. 1"
                raise ConfigError(msg)
        if self.first_epoch < 1:
            msg = f"first epoch {self.first_epoch} is invalid; epochs start at 1"
            raise ConfigError(msg)


@dataclass
class EpochStats:
    """A committed epoch.

    Attributes:
        epoch: Its number.
        opened_at: Clock reading when it opened.
        committed_at: Clock reading when it committed.
        reports: What each stateful task reported, by owner.
    """

    epoch: int
    opened_at: float
    committed_at: float
    reports: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """Seconds from open to commit."""
        return self.committed_at - self.opened_at


@dataclass
class Recovery:
    """One global rollback and its timeline (clock readings).

    Attributes:
        cause: What failed (``component:index`` of a task, or a ring node).
        component: Component of the failed task ('' for a ring node).
        task_index: Index of the failed task in its component (None: ring node).
        task_id: Storm task id of the failed task (None: ring node).
        detected_at: When the failure was detected.
        restored_at: When every stateful task had restored its state.
        resumed_at: When the first epoch after the rollback committed.
        restores: Restore reports of the stateful tasks, by owner.
    """

    cause: str
    component: str
    task_index: int | None
    task_id: int | None
    detected_at: float
    restored_at: float | None = None
    resumed_at: float | None = None
    restores: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Epoch:
    epoch: int
    opened_at: float
    spouts: set[int]
    stateful: set[int]
    offsets: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)
    injections: set[int] = field(default_factory=set)


@dataclass
class _Alignment:
    """Barrier alignment of one bolt task."""

    channels: frozenset[int]
    arrived: set[int] = field(default_factory=set)
    offsets: dict[str, Any] = field(default_factory=dict)
    held: list[tuple[Any, ...]] = field(default_factory=list)
    waiting: tuple[int, set[str]] | None = None


Deliver = Callable[..., None]


def _replayable(rt: TaskRuntime) -> bool:
    return getattr(rt.component.component_cls, "sr3_replayable", False) is True


class Coordinator:
    """Runs global epochs over the cluster's tasks (the engine thread only).

    Args:
        topology: The topology.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        settings: Interval, first epoch and commit hooks.
        timers: The cluster's timer queue.
        clock: Monotonic clock in seconds.
        queue_spout_command: Queues a command to a spout task.
        deliver: Delivers a tuple to a bolt task, bypassing alignment.
        recycle: Kills and restarts a task as part of a rollback.
    """

    def __init__(
        self,
        *,
        topology: LoadedTopology,
        tasks: Mapping[int, TaskRuntime],
        component_tasks: Callable[[str], list[int]],
        settings: CheckpointSettings,
        timers: TimerQueue,
        clock: Callable[[], float],
        queue_spout_command: Callable[[TaskRuntime, str, Any], None],
        deliver: Deliver,
        recycle: Callable[[TaskRuntime], None],
    ) -> None:
        self._topology = topology
        self._tasks = tasks
        self._settings = settings
        self._timers = timers
        self._clock = clock
        self._queue = queue_spout_command
        self._deliver = deliver
        self._recycle = recycle
        self._downstream: dict[str, list[int]] = {}
        self._align: dict[int, _Alignment] = {}
        loops = back_edges(topology)
        for comp in topology.components.values():
            sources = {
                sub.source
                for sub in comp.inputs
                if (sub.source, comp.name) not in loops
            }
            for source in sources:
                self._downstream.setdefault(source, []).extend(
                    component_tasks(comp.name)
                )
            channels = frozenset(t for s in sources for t in component_tasks(s))
            for task_id in component_tasks(comp.name):
                if comp.kind == "bolt":
                    self._align[task_id] = _Alignment(channels)
        self._owners = {
            task_id: self._owner(task_id, component_tasks)
            for task_id, rt in tasks.items()
        }
        self._index = {
            task_id: component_tasks(rt.component.name).index(task_id)
            for task_id, rt in tasks.items()
        }
        #: Whether a task death rolls back (something to restore or seek).
        self.rolls_back = any(
            (rt.component.stateful and not rt.is_spout)
            or (rt.is_spout and _replayable(rt))
            for rt in tasks.values()
        )
        self._next_epoch = settings.first_epoch
        self._current: _Epoch | None = None
        self.committed: list[EpochStats] = []
        self.recoveries: list[Recovery] = []
        #: Epochs abandoned after ``timeout_s``.
        self.abandoned = 0
        self._started = False

    def _owner(self, task_id: int, component_tasks: Callable[[str], list[int]]) -> str:
        comp = self._tasks[task_id].component.name
        index = component_tasks(comp).index(task_id)
        if self._tasks[task_id].is_spout:
            return f"{comp}/{index}"
        return f"{self._topology.name}/{comp}/{index}"

    # -- epochs ------------------------------------------------------------------------

    @property
    def last_committed(self) -> int | None:
        """Number of the last epoch committed by this run."""
        return self.committed[-1].epoch if self.committed else None

    @property
    def next_epoch(self) -> int:
        """The number the next epoch opened will get."""
        return self._next_epoch

    @property
    def in_flight(self) -> int | None:
        """The open epoch, if any."""
        return None if self._current is None else self._current.epoch

    def start(self) -> None:
        """Schedule the first epoch."""
        if not self._started:
            self._started = True
            self._schedule(self._settings.interval_s)

    def _schedule(self, delay_s: float) -> None:
        self._timers.at(self._clock() + delay_s, self._tick)

    def _tick(self) -> None:
        if self._current is None and not self.open_epoch():
            self._schedule(min(self._settings.interval_s, 0.05))

    def open_epoch(self) -> bool:
        """Open the next epoch now if none is open and every task runs.

        Returns:
            Whether an epoch was opened.
        """
        if self._current is not None:
            return False
        if any(rt.state is not TaskState.RUNNING for rt in self._tasks.values()):
            return False
        recovery = self.recoveries[-1] if self.recoveries else None
        if recovery is not None and recovery.restored_at is None:
            if any(
                r.component.stateful and not r.is_spout for r in self._tasks.values()
            ):
                return False
            recovery.restored_at = self._clock()
        epoch = self._next_epoch
        self._next_epoch += 1
        spouts = {t for t, rt in self._tasks.items() if rt.is_spout}
        stateful = {
            t
            for t, rt in self._tasks.items()
            if rt.component.stateful and not rt.is_spout
        }
        self._current = _Epoch(epoch, self._clock(), spouts, stateful)
        logger.debug("epoch %s opened", epoch)
        self._timers.at(
            self._clock() + self._settings.timeout_s, lambda: self._expire(epoch)
        )
        for task_id in sorted(spouts):
            rt = self._tasks[task_id]
            if _replayable(rt):
                self._queue(rt, BARRIER_COMMAND, epoch)
            elif rt.awaiting is None:
                self._inject(rt, epoch)
            else:
                self._current.injections.add(task_id)
        return True

    def _expire(self, epoch: int) -> None:
        current = self._current
        if current is None or current.epoch != epoch:
            return
        waiting = sorted(self._owners[t] for t in (*current.spouts, *current.stateful))
        logger.error(
            "epoch %s abandoned after %s s; still waiting for %s (a bolt that does "
            "not ack its inputs holds barriers back)",
            epoch,
            self._settings.timeout_s,
            waiting,
        )
        self.abandoned += 1
        self._drop_epoch()
        self._schedule(self._settings.interval_s)

    def _drop_epoch(self) -> None:
        """Forget the open epoch and every alignment; deliver the held tuples."""
        self._current = None
        for align in self._align.values():
            align.arrived.clear()
            align.offsets = {}
            align.waiting = None
            held, align.held = align.held, []
            for args in held:
                self._deliver(*args)

    def spout_synced(self, rt: TaskRuntime) -> None:
        """A spout answered a command: inject a pending barrier of a plain spout."""
        current = self._current
        if current is not None and rt.task_id in current.injections:
            current.injections.discard(rt.task_id)
            self._inject(rt, current.epoch)

    def _inject(self, rt: TaskRuntime, epoch: int) -> None:
        self.spout_barrier(rt, [epoch, {"offset": None}])

    def spout_barrier(self, rt: TaskRuntime, values: list[Any]) -> None:
        """A spout task emitted the barrier of the open epoch (its offset inside)."""
        current = self._current
        epoch = int(values[0])
        if (
            current is None
            or epoch != current.epoch
            or rt.task_id not in current.spouts
        ):
            return
        offset = dict(values[1] or {}).get("offset")
        owner = self._owners[rt.task_id]
        current.offsets[owner] = offset
        current.spouts.discard(rt.task_id)
        self._forward(rt, epoch, {owner: offset})
        self._maybe_commit()

    def bolt_barrier(self, rt: TaskRuntime, values: list[Any]) -> None:
        """A stateful task captured its state and emitted the barrier on."""
        current = self._current
        epoch = int(values[0])
        if current is None or epoch != current.epoch:
            return
        align = self._align[rt.task_id]
        self._forward(rt, epoch, align.offsets)
        align.offsets = {}

    def snapshot_written(self, rt: TaskRuntime, params: Any) -> None:
        """A stateful task's snapshot of the open epoch is durable: its report."""
        current = self._current
        report = dict(params or {})
        if current is None or report.get("epoch") != current.epoch:
            return
        if rt.task_id not in current.stateful:
            return
        current.reports[self._owners[rt.task_id]] = report
        current.stateful.discard(rt.task_id)
        self._maybe_commit()

    def _forward(self, rt: TaskRuntime, epoch: int, offsets: Mapping[str, Any]) -> None:
        for target in self._downstream.get(rt.component.name, []):
            self._barrier_arrives(target, rt.task_id, epoch, offsets)

    def _barrier_arrives(
        self, target: int, channel: int, epoch: int, offsets: Mapping[str, Any]
    ) -> None:
        align = self._align[target]
        if channel not in align.channels:
            return  # a barrier that went round a cycle
        align.arrived.add(channel)
        align.offsets.update(offsets)
        if align.arrived < align.channels:
            return
        rt = self._tasks[target]
        if rt.component.stateful:
            align.arrived.clear()
            if rt.process is not None:
                info = {"offsets": dict(align.offsets)}
                rt.process.send(
                    bolt_tuple_msg(
                        f"sr3-barrier-{epoch}",
                        BARRIER_SOURCE,
                        BARRIER_STREAM,
                        SYSTEM_TASK_ID,
                        [epoch, info],
                    )
                )
            self._release(align)
        else:
            # every channel stays held until the inputs from before the barrier
            # are done: a bolt combining inputs (a BatchingBolt) would otherwise
            # fold later tuples into the output it owes this epoch
            align.waiting = (epoch, set(rt.inputs))
            self.input_done(rt)

    def _release(self, align: _Alignment) -> None:
        held, align.held = align.held, []
        for args in held:
            self._deliver(*args)

    def input_done(self, rt: TaskRuntime) -> None:
        """A bolt acked or failed an input: forward a barrier it was waiting for.

        Once forwarded, the tuples held back since the alignment are delivered.
        """
        align = self._align.get(rt.task_id)
        if align is None or align.waiting is None:
            return
        epoch, before = align.waiting
        if not any(rt.owes(tuple_id) for tuple_id in before):
            align.waiting = None
            align.arrived.clear()
            offsets, align.offsets = align.offsets, {}
            self._forward(rt, epoch, offsets)
            self._release(align)

    def hold(self, target: int, source_task: int, args: tuple[Any, ...]) -> bool:
        """Hold back a tuple from a channel already past the barrier.

        Returns:
            Whether the tuple was held (the caller must not deliver it).
        """
        align = self._align.get(target)
        if align is None or source_task not in align.arrived:
            return False
        align.held.append(args)
        return True

    def busy(self) -> bool:
        """Whether tuples are held back or a barrier is still waiting to move."""
        return any(a.held or a.waiting for a in self._align.values())

    def _maybe_commit(self) -> None:
        current = self._current
        if current is None or current.spouts or current.stateful:
            return
        owners = sorted(
            self._owners[t]
            for t, rt in self._tasks.items()
            if rt.component.stateful and not rt.is_spout
        )
        try:
            self._settings.hooks.commit(current.epoch, current.offsets, owners)
        except StormBridgeError as exc:
            logger.error("epoch %s could not commit: %s", current.epoch, exc)
            self._current = None
            self._schedule(self._settings.interval_s)
            return
        now = self._clock()
        self.committed.append(
            EpochStats(current.epoch, current.opened_at, now, dict(current.reports))
        )
        self._current = None
        # every rollback since the last commit resumed with this one: a task death
        # and a ring node's, detected before any epoch committed in between,
        # are two rollbacks that one commit ends
        for recovery in self.recoveries:
            if recovery.resumed_at is None:
                recovery.resumed_at = now
        self._schedule(self._settings.interval_s)

    # -- failures ----------------------------------------------------------------------

    def task_died(self, rt: TaskRuntime) -> None:
        """A task died: roll the whole topology back to the last committed epoch.

        Without stateful bolts and replayable spouts there is nothing to roll
        back: the open epoch is abandoned (its barriers died with the task) and
        only the dead task restarts, as Storm restarts only a dead worker.
        """
        index = self._index[rt.task_id]
        cause = f"{rt.component.name}:{index}"
        if not self.rolls_back:
            logger.warning(
                "%s died; nothing to roll back (no stateful bolt, no replayable "
                "spout): only it restarts",
                cause,
            )
            if self._current is not None:
                self._drop_epoch()
                self._schedule(self._settings.interval_s)
            return
        self.rollback(cause, rt.component.name, index, rt.task_id)

    def rollback(
        self,
        cause: str,
        component: str = "",
        task_index: int | None = None,
        task_id: int | None = None,
    ) -> None:
        """Restart every task from the last committed epoch; drop the in-flight."""
        logger.warning("rolling back to the last committed epoch: %s", cause)
        self._current = None
        for align in self._align.values():
            align.arrived.clear()
            align.offsets = {}
            align.held.clear()
            align.waiting = None
        recovery = self.recoveries[-1] if self.recoveries else None
        if recovery is None or recovery.restored_at is not None:
            self.recoveries.append(
                Recovery(cause, component, task_index, task_id, self._clock())
            )
        else:
            recovery.cause += f", {cause}"
            recovery.restores.clear()
        for rt in self._tasks.values():
            if rt.is_spout and not _replayable(rt):
                # A plain spout cannot seek: it keeps running, and the trees of
                # its tuples lost with the bolts fail back to it (at-least-once).
                continue
            if rt.state in (TaskState.STARTING, TaskState.RUNNING):
                self._recycle(rt)
        self._schedule(0.0)

    def restored(self, rt: TaskRuntime, params: Any) -> None:
        """A stateful task reported its restore; note when all have."""
        if not self.recoveries or self.recoveries[-1].restored_at is not None:
            return
        recovery = self.recoveries[-1]
        recovery.restores[self._owners[rt.task_id]] = params
        stateful = [
            t for t, r in self._tasks.items() if r.component.stateful and not r.is_spout
        ]
        if len(recovery.restores) >= len(stateful):
            recovery.restored_at = self._clock()
            self._schedule(0.0)
