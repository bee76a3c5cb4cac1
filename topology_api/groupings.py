"""Storm's stream groupings, bit-compatible with ``GrouperFactory.mkGrouper``.

Target tasks are always sorted ascending first (Storm's ``Ordering.natural()``).

* FIELDS: ``targets[Math.floorMod(Arrays.deepHashCode(selected), n)]`` where the
  hash is Java's ``hashCode`` of the values as Storm's JSON parser decodes them
  (:func:`topology_api.java_hash.java_hash`), not murmur.
* FIELDS with no fields (streamparse's ``Grouping.GLOBAL``): the lowest task.
* SHUFFLE and LOCAL_OR_SHUFFLE: Storm's ``ShuffleGrouping``: per sender a random
  permutation of the targets, walked round robin starting at its second entry.
  Every task of the local cluster is local, so LOCAL_OR_SHUFFLE is a shuffle.
* NONE: a uniformly random task per tuple (Storm's ``NoneGrouper``).
* ALL: every task. DIRECT: the emitter picks the task (:class:`DirectGrouper`
  only marks the subscription).
* Storm's ``PartialKeyGrouping``, as CUSTOM_OBJECT (no arguments: keyed by the
  first value) or CUSTOM_SERIALIZED (with ``Fields``): one of the key's two
  candidate tasks, the less loaded one per sender
  (:mod:`topology_api.partial_key`). Other Java classes cannot run here.

The hash, and how Storm's JSON parser boxes integers, is :mod:`topology_api.java_hash`.
"""

from __future__ import annotations

import abc
import enum
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topology_api.java_hash import IntegerBoxing, fields_task_index, java_hash
from topology_api.partial_key import (
    PARTIAL_KEY_CLASS,
    BalancedSelector,
    first_value_key,
    two_task_assignment,
)

__all__ = [
    "AllGrouper",
    "DirectGrouper",
    "FieldsGrouper",
    "GlobalGrouper",
    "Grouper",
    "GroupingKind",
    "GroupingSpec",
    "NoneGrouper",
    "PartialKeyGrouper",
    "ShuffleGrouper",
    "make_grouper",
]


class GroupingKind(enum.Enum):
    """The members of Storm's Thrift ``Grouping`` union, named as in the context."""

    FIELDS = "FIELDS"
    SHUFFLE = "SHUFFLE"
    ALL = "ALL"
    NONE = "NONE"
    DIRECT = "DIRECT"
    CUSTOM_OBJECT = "CUSTOM_OBJECT"
    CUSTOM_SERIALIZED = "CUSTOM_SERIALIZED"
    LOCAL_OR_SHUFFLE = "LOCAL_OR_SHUFFLE"


@dataclass(frozen=True)
class GroupingSpec:
    """A grouping of one subscription, as plain data.

    Attributes:
        kind: The grouping type.
        fields: Grouping fields of a FIELDS grouping; empty means global.
        java_class: The class a CUSTOM_OBJECT grouping names, or the one a
            CUSTOM_SERIALIZED grouping was recognised as (else None).
        java_args: Its constructor arguments (Thrift passes primitives only).
            A recognised serialized ``PartialKeyGrouping`` keeps its fields in
            ``fields``.
    """

    kind: GroupingKind
    fields: tuple[str, ...] = ()
    java_class: str | None = None
    java_args: tuple[Any, ...] = ()

    @property
    def is_partial_key(self) -> bool:
        """Whether this is Storm's ``PartialKeyGrouping``, in a form it can run."""
        if self.java_class != PARTIAL_KEY_CLASS:
            return False
        if self.kind is GroupingKind.CUSTOM_OBJECT:
            return not self.java_args
        return self.kind is GroupingKind.CUSTOM_SERIALIZED

    @property
    def is_global(self) -> bool:
        """Whether this is a FIELDS grouping without fields (lowest task)."""
        return self.kind is GroupingKind.FIELDS and not self.fields

    def to_context(self) -> dict[str, Any]:
        """Return the map TopologyContext sends: ``type`` (and ``fields``)."""
        if self.kind is GroupingKind.FIELDS:
            return {"type": self.kind.value, "fields": list(self.fields)}
        return {"type": self.kind.value}


class Grouper(abc.ABC):
    """Chooses target tasks for one (sender task, stream, target component)."""

    def __init__(self, target_tasks: Sequence[int]) -> None:
        self.target_tasks: tuple[int, ...] = tuple(sorted(target_tasks))

    @abc.abstractmethod
    def choose_tasks(self, values: Sequence[Any]) -> list[int]:
        """Return the tasks that receive a tuple with ``values``.

        Raises:
            ValueError: the values lack a field the grouping needs.
        """


class ShuffleGrouper(Grouper):
    """Storm's ``ShuffleGrouping``: a shuffled round robin, one per sender."""

    def __init__(self, target_tasks: Sequence[int], rng: random.Random) -> None:
        super().__init__(target_tasks)
        self._choices = list(self.target_tasks)
        rng.shuffle(self._choices)
        self._current = 0

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        self._current += 1
        if self._current >= len(self._choices):
            self._current = 0
        return [self._choices[self._current]]


class FieldsGrouper(Grouper):
    """Storm's ``FieldsGrouper``: Java ``deepHashCode`` of the selected values."""

    def __init__(
        self,
        target_tasks: Sequence[int],
        *,
        output_fields: Sequence[str],
        group_fields: Sequence[str],
        boxing: IntegerBoxing = IntegerBoxing.LONG,
    ) -> None:
        super().__init__(target_tasks)
        missing = [f for f in group_fields if f not in output_fields]
        if missing:
            known = list(output_fields)
            msg = f"grouping fields {missing} are not among the stream's fields {known}"
            raise ValueError(msg)
        self._positions = [list(output_fields).index(f) for f in group_fields]
        self._group_fields = tuple(group_fields)
        self._boxing = boxing

    def select(self, values: Sequence[Any]) -> list[Any]:
        """Return the grouping fields' values of a tuple.

        Raises:
            ValueError: the tuple is too short for the grouping fields.
        """
        if self._positions and max(self._positions) >= len(values):
            wanted = list(self._group_fields)
            msg = f"tuple {list(values)!r} has no value for grouping fields {wanted}"
            raise ValueError(msg)
        return [values[p] for p in self._positions]

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        selected = self.select(values)
        return [
            self.target_tasks[
                fields_task_index(selected, len(self.target_tasks), self._boxing)
            ]
        ]


class GlobalGrouper(Grouper):
    """Storm's ``GlobalGrouper``: the lowest target task."""

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        return [self.target_tasks[0]] if self.target_tasks else []


class AllGrouper(Grouper):
    """Storm's ``AllGrouper``: every target task."""

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        return list(self.target_tasks)


class NoneGrouper(Grouper):
    """Storm's ``NoneGrouper``: one uniformly random target task per tuple."""

    def __init__(self, target_tasks: Sequence[int], rng: random.Random) -> None:
        super().__init__(target_tasks)
        self._rng = rng

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        return [self.target_tasks[self._rng.randrange(len(self.target_tasks))]]


class PartialKeyGrouper(Grouper):
    """Storm's ``PartialKeyGrouping``: two candidate tasks per key, balanced.

    Without ``group_fields`` the key is the first value's ``toString()``; with
    them, the big-endian ``hashCode`` of each selected value (0 for null).
    """

    def __init__(
        self,
        target_tasks: Sequence[int],
        *,
        output_fields: Sequence[str] = (),
        group_fields: Sequence[str] = (),
        boxing: IntegerBoxing = IntegerBoxing.LONG,
    ) -> None:
        super().__init__(target_tasks)
        self._selector = BalancedSelector()
        self._fields = (
            FieldsGrouper(target_tasks, output_fields=output_fields,
                          group_fields=group_fields, boxing=boxing)
            if group_fields else None
        )  # fmt: skip
        self._boxing = boxing

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        if not values:  # Storm sends an empty tuple nowhere
            return []
        if self._fields is None:
            key = first_value_key(values[0])
        else:
            selected = self._fields.select(values)
            key = b"".join(
                struct.pack(">i", java_hash(v, self._boxing)) for v in selected
            )
        candidates = two_task_assignment(self.target_tasks, key)
        return [self._selector.choose(candidates)]


class DirectGrouper(Grouper):
    """Marks a DIRECT subscription: only ``emitDirect`` reaches it."""

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        msg = "Cannot do regular emit to direct stream"
        raise ValueError(msg)


def make_grouper(
    spec: GroupingSpec,
    target_tasks: Sequence[int],
    *,
    output_fields: Sequence[str],
    rng: random.Random,
    boxing: IntegerBoxing = IntegerBoxing.LONG,
) -> Grouper:
    """Return the grouper Storm's ``GrouperFactory.mkGrouper`` builds for ``spec``.

    Raises:
        ValueError: the grouping is a Java custom grouping other than
            ``PartialKeyGrouping()`` (not runnable without a JVM) or names fields
            the stream does not have.
    """
    kind = spec.kind
    if kind is GroupingKind.FIELDS:
        if spec.is_global:
            return GlobalGrouper(target_tasks)
        return FieldsGrouper(
            target_tasks,
            output_fields=output_fields,
            group_fields=spec.fields,
            boxing=boxing,
        )
    if kind in (GroupingKind.SHUFFLE, GroupingKind.LOCAL_OR_SHUFFLE):
        return ShuffleGrouper(target_tasks, rng)
    if kind is GroupingKind.ALL:
        return AllGrouper(target_tasks)
    if kind is GroupingKind.NONE:
        return NoneGrouper(target_tasks, rng)
    if kind is GroupingKind.DIRECT:
        return DirectGrouper(target_tasks)
    if spec.is_partial_key:
        return PartialKeyGrouper(
            target_tasks,
            output_fields=output_fields,
            group_fields=spec.fields,
            boxing=boxing,
        )
    msg = (
        f"{kind.value} groupings are Java classes; the local multilang cluster "
        f"runs only {PARTIAL_KEY_CLASS} (no arguments) among them"
    )
    raise ValueError(msg)
