"""Tuple routing and the cycles barriers skip, for the local cluster.

Task ids and the handshake context (Storm's ``StormCommon.stormTaskInfo`` and
``TopologyContext.toJSONString``) are :mod:`topology_api.stormconf`'s, which the
Spark bridge shares; they are re-exported here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from storm_bridge.cluster.keygroup_routing import KeyGroupGrouper
from storm_bridge.errors import StormBridgeError
from topology_api.component_specs import ComponentInfo
from topology_api.groupings import DirectGrouper, Grouper, GroupingKind, make_grouper
from topology_api.java_hash import IntegerBoxing
from topology_api.stormconf import ACKER_COMPONENT, assign_task_ids, task_context
from topology_api.topology import LoadedTopology

__all__ = [
    "ACKER_COMPONENT",
    "RoutingError",
    "Router",
    "assign_task_ids",
    "back_edges",
    "task_context",
]


class RoutingError(StormBridgeError, ValueError):
    """An emit Storm's ``Task.getOutgoingTasks`` would reject (the emitter dies)."""


def back_edges(topology: LoadedTopology) -> frozenset[tuple[str, str]]:
    """Return the subscriptions ``(source, subscriber)`` that close a cycle.

    A depth-first walk from the spouts (in definition order) finds them: an
    edge to a component still on the walk's path goes back. Barriers do not
    travel on them, so a bolt never waits for a barrier that only its own
    output could bring (a cycle would hold its tuples forever). The price: a
    tuple on such an edge when the barrier passes counts in the next epoch, so
    a rollback to this one loses it, as Flink loses records in its iterations.
    """
    subscribers: dict[str, list[str]] = {name: [] for name in topology.components}
    for comp in topology.components.values():
        for source in dict.fromkeys(sub.source for sub in comp.inputs):
            if source in subscribers:
                subscribers[source].append(comp.name)
    loops: set[tuple[str, str]] = set()
    done: set[str] = set()
    for root, comp in topology.components.items():
        if comp.kind != "spout" or root in done:
            continue
        path = {root}
        stack = [(root, iter(subscribers[root]))]
        while stack:
            name, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                stack.pop()
                path.discard(name)
                done.add(name)
            elif nxt in path:
                loops.add((name, nxt))
            elif nxt not in done:
                path.add(nxt)
                stack.append((nxt, iter(subscribers[nxt])))
    return frozenset(loops)


class Router:
    """Chooses target tasks for emits, with one grouper per sender task and stream.

    Like Storm's executors, each sender task has its own groupers (so its own
    shuffle permutation); :meth:`reset_task` drops them when the task restarts.
    """

    def __init__(
        self,
        topology: LoadedTopology,
        task_to_component: Mapping[int, str],
        *,
        rng: random.Random,
        boxing: IntegerBoxing,
    ) -> None:
        self._topology = topology
        self._task_to_component = task_to_component
        self._rng = rng
        self._boxing = boxing
        self._component_tasks: dict[str, list[int]] = {}
        for task, name in sorted(task_to_component.items()):
            self._component_tasks.setdefault(name, []).append(task)
        self._subscribers: dict[tuple[str, str], list[ComponentInfo]] = {}
        for comp in topology.components.values():
            for sub in comp.inputs:
                self._subscribers.setdefault((sub.source, sub.stream), []).append(comp)
        self._groupers: dict[tuple[int, str], dict[str, Grouper]] = {}
        #: Key group -> task index tables of the key-group-routed stateful
        #: components (``sr3.rebalance.routing = key-groups``; empty: none).
        #: A table changes in place as key groups move.
        self.key_groups: dict[str, list[int]] = {}

    def component_tasks(self, component: str) -> list[int]:
        """Return the sorted task ids of a component."""
        return list(self._component_tasks.get(component, ()))

    def retask(self) -> None:
        """Re-read the task ids of every component (tasks came or went).

        Every grouper is rebuilt on its next use, over the new task lists.
        """
        self._component_tasks = {}
        for task, name in sorted(self._task_to_component.items()):
            self._component_tasks.setdefault(name, []).append(task)
        self._groupers.clear()

    def reroute(
        self, source_task: int, stream: str, values: Sequence[Any], component: str
    ) -> list[int]:
        """Return the tasks of ``component`` a regular emit goes to now.

        For tuples held while ``component``'s tasks changed: they go where the
        grouping sends them over the new task list.

        Raises:
            RoutingError: the grouping fails, or is direct.
        """
        grouper = self._groupers_for(source_task, stream).get(component)
        if grouper is None:
            return []
        if isinstance(grouper, DirectGrouper):
            msg = f"a direct stream {stream!r} to {component!r} cannot be rerouted"
            raise RoutingError(msg)
        try:
            return list(grouper.choose_tasks(values))
        except (ValueError, TypeError) as exc:
            raise RoutingError(str(exc)) from exc

    def key_group(
        self, source_task: int, stream: str, values: Sequence[Any], component: str
    ) -> int | None:
        """Return the key group a tuple routes by into ``component`` (None: none).

        None unless ``component`` is routed by key group on that subscription.
        """
        grouper = self._groupers_for(source_task, stream).get(component)
        if not isinstance(grouper, KeyGroupGrouper):
            return None
        try:
            return grouper.key_group(values)
        except (ValueError, TypeError):
            return None

    def reset_task(self, task_id: int) -> None:
        """Forget the groupers of a sender task (it restarted)."""
        for key in [k for k in self._groupers if k[0] == task_id]:
            del self._groupers[key]

    def _groupers_for(self, task_id: int, stream: str) -> dict[str, Grouper]:
        key = (task_id, stream)
        groupers = self._groupers.get(key)
        if groupers is not None:
            return groupers
        name = self._task_to_component[task_id]
        comp = self._topology.components[name]
        if stream not in comp.outputs:
            msg = f"Unknown stream ID: {stream!r} (declared: {sorted(comp.outputs)})"
            raise RoutingError(msg)
        fields = comp.outputs[stream].fields
        groupers = {}
        for target in self._subscribers.get((name, stream), []):
            spec = next(
                s.grouping
                for s in target.inputs
                if (s.source, s.stream) == (name, stream)
            )
            table = self.key_groups.get(target.name)
            if table is not None and spec.kind is GroupingKind.FIELDS and spec.fields:
                groupers[target.name] = KeyGroupGrouper(
                    self._component_tasks[target.name],
                    output_fields=fields,
                    group_fields=spec.fields,
                    table=table,
                )
                continue
            groupers[target.name] = make_grouper(
                spec,
                self._component_tasks[target.name],
                output_fields=fields,
                rng=self._rng,
                boxing=self._boxing,
            )
        self._groupers[key] = groupers
        return groupers

    def check_fields(self, task_id: int, stream: str, values: Sequence[Any]) -> None:
        """Check a tuple has as many values as its stream has fields.

        Raises:
            RoutingError: the counts differ (Storm's ``TupleImpl`` sanity check).
        """
        comp = self._topology.components[self._task_to_component[task_id]]
        declared = comp.outputs.get(stream)
        if declared is not None and len(declared.fields) != len(values):
            msg = (
                "Tuple created with wrong number of fields. Expected "
                f"{len(declared.fields)} fields but got {len(values)} fields"
            )
            raise RoutingError(msg)

    def targets(self, task_id: int, stream: str, values: Sequence[Any]) -> list[int]:
        """Return the target tasks of a regular emit.

        Raises:
            RoutingError: the stream is undeclared, direct, or a grouping fails.
        """
        tasks: list[int] = []
        for grouper in self._groupers_for(task_id, stream).values():
            if isinstance(grouper, DirectGrouper):
                msg = f"Cannot do regular emit to direct stream {stream!r}"
                raise RoutingError(msg)
            try:
                tasks.extend(grouper.choose_tasks(values))
            except (ValueError, TypeError) as exc:
                raise RoutingError(str(exc)) from exc
        return tasks

    def direct_targets(self, task_id: int, stream: str, target_task: int) -> list[int]:
        """Return ``[target_task]`` if it takes ``stream`` directly, else ``[]``.

        Raises:
            RoutingError: the stream is undeclared or the target expects a regular
                grouping.
        """
        groupers = self._groupers_for(task_id, stream)
        grouper = groupers.get(self._task_to_component.get(target_task, ""))
        if grouper is None:
            return []
        if not isinstance(grouper, DirectGrouper):
            msg = f"Cannot emitDirect to task {target_task}: it expects a grouping"
            raise RoutingError(msg)
        return [target_task]
