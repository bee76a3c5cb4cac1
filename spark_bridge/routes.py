"""The Storm tasks an emit goes to, decided when the hosted component emits.

``emit(..., need_task_ids=True)`` returns, on Storm, the task ids the tuple was
sent to, over every subscriber of the stream in the order Storm's router walks
them (components in topology order): the task the fields hash picks, the lowest
task for a global grouping, every task for ALL, the one a shuffle picks.
:class:`EmitRouter` computes the same ids for a hosted task:

- FIELDS, global and ALL are functions of the values, so the stages that run
  the subscribers (:mod:`spark_bridge.stages`, :mod:`spark_bridge.keyed`) pick
  the same tasks later;
- SHUFFLE, LOCAL_OR_SHUFFLE and NONE are Storm's own groupers, one per sender
  task and stream, seeded by the sender's name (and a spout's offset, so a
  replayed batch picks the same tasks); their picks travel with the emit row
  (:func:`routed_task`), and
  the subscriber's stage runs the tuple on that task instead of the
  partition's.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spark_bridge.context import task_ids
from spark_bridge.errors import ComponentError
from sr3.codec import decode_value, encode_value
from topology_api.groupings import (
    Grouper,
    GroupingKind,
    GroupingSpec,
    NoneGrouper,
    ShuffleGrouper,
)
from topology_api.java_hash import IntegerBoxing, fields_task_index
from topology_api.topology import LoadedTopology

__all__ = ["EmitRouter", "routed_task"]

_SHUFFLES: Final = frozenset(
    {GroupingKind.SHUFFLE, GroupingKind.LOCAL_OR_SHUFFLE, GroupingKind.NONE}
)


@dataclass(frozen=True)
class _Target:
    """One subscriber of a stream: its grouping and its tasks' ids (ascending)."""

    component: str
    grouping: GroupingSpec
    positions: tuple[int, ...]
    ids: tuple[int, ...]


def routed_task(route: bytes | None, component: str) -> int | None:
    """Return the task index an emit row's route gives ``component``, if any."""
    if route is None:
        return None
    index = decode_value(route).get(component)
    return None if index is None else int(index)


class EmitRouter:
    """Storm's target tasks of the emits of one hosted task (module docstring).

    Args:
        topology: The loaded topology.
        component: The emitting component.
        index: The emitting task's index.
        overrides: The run's Storm conf overrides (they set the acker count,
            hence the task ids, and the integer boxing of fields hashes).
    """

    def __init__(
        self,
        topology: LoadedTopology,
        component: str,
        index: int,
        overrides: Mapping[str, Any],
    ) -> None:
        self._sender = f"{component}/{index}"
        ids = task_ids(topology, overrides)
        tasks: dict[str, list[int]] = {}
        for task, name in sorted(ids.items()):
            tasks.setdefault(name, []).append(task)
        outputs = topology.components[component].outputs
        #: stream -> subscribers, one per component (Storm's first subscription)
        self._targets: dict[str, list[_Target]] = {}
        for comp in topology.components.values():
            for sub in comp.inputs:
                if sub.source != component or sub.stream not in outputs:
                    continue
                targets = self._targets.setdefault(sub.stream, [])
                if any(t.component == comp.name for t in targets):
                    continue
                fields = list(outputs[sub.stream].fields)
                positions = tuple(
                    fields.index(f) for f in sub.grouping.fields if f in fields
                )
                targets.append(
                    _Target(comp.name, sub.grouping, positions, tuple(tasks[comp.name]))
                )
        self._boxing = IntegerBoxing.of({**topology.config, **overrides})
        self._groupers: dict[tuple[str, str], Grouper] = {}
        self._seed = ""

    def reseed(self, seed: str) -> None:
        """Start the shuffles over from ``seed`` (a spout's offset).

        A spout's emits at one offset then pick the same tasks whenever the
        offset is replayed, and different offsets pick different tasks.
        """
        self._seed = seed
        self._groupers.clear()

    def _shuffled(self, stream: str, target: _Target) -> int:
        key = (stream, target.component)
        grouper = self._groupers.get(key)
        if grouper is None:
            seed = f"{self._sender}/{stream}/{target.component}/{self._seed}"
            rng = random.Random(seed)
            indexes = range(len(target.ids))
            if target.grouping.kind is GroupingKind.NONE:
                grouper = NoneGrouper(indexes, rng)
            else:
                grouper = ShuffleGrouper(indexes, rng)
            self._groupers[key] = grouper
        return grouper.choose_tasks(())[0]

    def targets(
        self, stream: str, values: Sequence[Any]
    ) -> tuple[list[int], bytes | None]:
        """Return the task ids of an emit and its route (None: nothing shuffled).

        Args:
            stream: The emit's stream (declared).
            values: The values as subscribers receive them.

        Raises:
            ComponentError: the tuple lacks a grouping field, or a grouping
                value cannot be hashed as Storm hashes it (Storm kills the
                task on such an emit).
        """
        ids: list[int] = []
        route: dict[str, int] = {}
        for target in self._targets.get(stream, ()):
            kind = target.grouping.kind
            if kind is GroupingKind.ALL:
                ids.extend(target.ids)
            elif kind in _SHUFFLES:
                index = self._shuffled(stream, target)
                route[target.component] = index
                ids.append(target.ids[index])
            elif target.grouping.is_global:
                ids.append(target.ids[0])
            else:
                ids.append(target.ids[self._fields_index(stream, target, values)])
        return ids, (encode_value(route) if route else None)

    def _fields_index(self, stream: str, target: _Target, values: Sequence[Any]) -> int:
        wanted = list(target.grouping.fields)
        try:
            if len(target.positions) != len(wanted) or (
                target.positions and max(target.positions) >= len(values)
            ):
                msg = f"tuple {list(values)!r} lacks grouping fields {wanted}"
                raise ValueError(msg)
            selected = [values[p] for p in target.positions]
            return fields_task_index(selected, len(target.ids), self._boxing)
        except (TypeError, ValueError) as exc:
            msg = (
                f"component {self._sender!r}: emit of {list(values)!r} on stream "
                f"{stream!r} to {target.component!r} failed: {exc}; emit values "
                "Storm's JSON multilang carries, with every grouping field"
            )
            raise ComponentError(msg) from exc
