"""Barrier routing and alignment of the local cluster's bolt tasks.

A barrier goes to every task of every downstream component (ALL grouping),
never on a subscription that closes a cycle (see
:func:`~storm_bridge.cluster.context.back_edges`). Each bolt task aligns: once
the barrier of a channel (upstream task) arrived, later tuples of that channel
are held back until every channel delivered its barrier. Then a stateful task
gets the barrier as a tuple (it emits it on itself, see
:meth:`BarrierRouter.forward_captured`); a stateless task forwards it once every
input it had before the alignment is acked or failed, its later tuples held
until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storm_bridge.cluster.context import back_edges
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.components import BARRIER_STREAM
from storm_bridge.messages import SYSTEM_TASK_ID, bolt_tuple_msg
from topology_api.topology import LoadedTopology

__all__ = ["BARRIER_SOURCE", "BarrierRouter", "Deliver"]

#: Component id barrier tuples carry when the cluster delivers them to a task.
BARRIER_SOURCE = "__sr3"

#: Delivers a tuple to a bolt task, bypassing alignment.
Deliver = Callable[..., None]


@dataclass
class _Alignment:
    """Barrier alignment of one bolt task."""

    channels: frozenset[int]
    arrived: set[int] = field(default_factory=set)
    offsets: dict[str, Any] = field(default_factory=dict)
    held: list[tuple[Any, ...]] = field(default_factory=list)
    waiting: tuple[int, set[str]] | None = None


class BarrierRouter:
    """Moves barriers downstream and aligns them at every bolt task.

    It owns the downstream task lists and one alignment per bolt task: which
    channels delivered the open epoch's barrier, the spout offsets gathered on
    the way, the tuples held back and the barrier a stateless task still owes.

    Args:
        topology: The topology.
        tasks: Task runtimes by id.
        component_tasks: Sorted task ids by component.
        deliver: Delivers a tuple to a bolt task, bypassing alignment.
    """

    def __init__(
        self,
        *,
        topology: LoadedTopology,
        tasks: Mapping[int, TaskRuntime],
        component_tasks: Callable[[str], list[int]],
        deliver: Deliver,
    ) -> None:
        self._tasks = tasks
        self._deliver = deliver
        #: Called with (stateful task, epoch) as its barrier is sent to it.
        self.on_barrier_sent: Callable[[TaskRuntime, int], None] | None = None
        #: Called with (task, epoch) as a task's barrier goes downstream.
        self.on_forward: Callable[[TaskRuntime, int], None] | None = None
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

    def forward(self, rt: TaskRuntime, epoch: int, offsets: Mapping[str, Any]) -> None:
        """Send the barrier of ``epoch`` from ``rt`` to every downstream task."""
        if self.on_forward is not None:
            self.on_forward(rt, epoch)
        for target in self._downstream.get(rt.component.name, []):
            self._barrier_arrives(target, rt.task_id, epoch, offsets)

    def forward_captured(self, rt: TaskRuntime, epoch: int) -> None:
        """A stateful task captured its state: forward its barrier with the offsets."""
        align = self._align[rt.task_id]
        self.forward(rt, epoch, align.offsets)
        align.offsets = {}

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
                if self.on_barrier_sent is not None:
                    self.on_barrier_sent(rt, epoch)
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
            self.forward(rt, epoch, offsets)
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

    def release_all(self) -> None:
        """Forget every alignment of an abandoned epoch; deliver the held tuples."""
        for align in self._align.values():
            align.arrived.clear()
            align.offsets = {}
            align.waiting = None
            self._release(align)

    def discard_all(self) -> None:
        """Forget every alignment and drop the held tuples (a rollback)."""
        for align in self._align.values():
            align.arrived.clear()
            align.offsets = {}
            align.held.clear()
            align.waiting = None
