"""Storm's stream groupings, bit-compatible with ``GrouperFactory.mkGrouper``.

Target tasks are always sorted ascending first (Storm's ``Ordering.natural()``).

* FIELDS: ``targets[Math.floorMod(Arrays.deepHashCode(selected), n)]`` where the
  hash is Java's ``hashCode`` of the values as Storm's JSON parser decodes them
  (:func:`java_hash`), not murmur.
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

How JSON integers become Java objects changed with Storm 2.6 (json-simple to
json-smart), and with it the hash of negative integers: see :class:`IntegerBoxing`.
"""

from __future__ import annotations

import abc
import decimal
import enum
import math
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sr3.config import read_setting
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
    "IntegerBoxing",
    "NoneGrouper",
    "PartialKeyGrouper",
    "ShuffleGrouper",
    "fields_task_index",
    "java_hash",
    "key_task_index",
    "make_grouper",
    "route_hash",
]

_MASK32: Final = 0xFFFFFFFF
_MASK64: Final = 0xFFFFFFFFFFFFFFFF
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_TRUE_HASH, _FALSE_HASH = 1231, 1237
_CANONICAL_NAN_BITS: Final = 0x7FF8000000000000
#: json-smart (Storm >= 2.6) reads a decimal whose JSON text is longer than this
#: as a BigDecimal, not a Double (``JSONParserBase.extractFloat``).
_DOUBLE_TEXT_MAX: Final = 18


class IntegerBoxing(enum.Enum):
    """Which Java type Storm's JSON parser gives an integer, hence its hash.

    Attributes:
        LONG: json-simple (Storm before 2.6): every integer is a ``Long``
            (``Long.hashCode``: ``(int)(v ^ (v >>> 32))``, so ``-1`` hashes to 0).
        INTEGER: json-smart in permissive mode (Storm 2.6 and later): an
            ``Integer`` when it fits 32 bits (hash = value), else a ``Long``;
            a decimal whose JSON text is longer than 18 characters is a
            ``BigDecimal``, others a ``Double``.
    """

    LONG = "long"
    INTEGER = "integer"

    @classmethod
    def of(cls, conf: Mapping[str, Any]) -> IntegerBoxing:
        """The boxing a topology conf asks for (``sr3.storm.json.integer.boxing``).

        Raises:
            ConfigError: neither ``long`` nor ``integer`` (checked by its row of
                :data:`sr3.config.KEYS`, which also gives the default ``long``).
        """
        return cls(read_setting(conf, INTEGER_BOXING_KEY))


#: Conf key choosing how JSON integers are hashed by fields groupings.
INTEGER_BOXING_KEY: Final = "sr3.storm.json.integer.boxing"


def _i32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _long_hash(value: int) -> int:
    bits = value & _MASK64
    return _i32(bits ^ (bits >> 32))


def _big_integer_hash(value: int) -> int:
    # java.math.BigInteger.hashCode: 31-based over the big-endian 32-bit words of
    # the magnitude, times the signum.
    magnitude = abs(value)
    words: list[int] = []
    while magnitude:
        words.append(magnitude & _MASK32)
        magnitude >>= 32
    result = 0
    for word in reversed(words):
        result = (31 * result + word) & _MASK32
    sign = (value > 0) - (value < 0)
    return _i32(result * sign)


def _double_hash(value: float) -> int:
    bits = (
        _CANONICAL_NAN_BITS
        if math.isnan(value)
        else struct.unpack(">q", struct.pack(">d", value))[0]
    )
    return _long_hash(bits)


def _big_decimal_hash(text: str) -> int:
    # java.math.BigDecimal.hashCode: 31 * unscaledValue.hashCode() + scale
    sign, digits, exponent = decimal.Decimal(text).as_tuple()
    unscaled = int("".join(map(str, digits)) or "0")
    if sign:
        unscaled = -unscaled
    scale = -exponent if isinstance(exponent, int) else 0  # finite: an int
    return _i32(31 * _big_integer_hash(unscaled) + scale)


def _string_hash(value: str) -> int:
    units = value.encode("utf-16-be")
    result = 0
    for (unit,) in struct.iter_unpack(">H", units):
        result = (31 * result + unit) & _MASK32
    return _i32(result)


def java_hash(value: Any, boxing: IntegerBoxing = IntegerBoxing.LONG) -> int:
    """Return Java's ``hashCode`` of a JSON-decoded tuple value.

    ``None`` hashes to 0, booleans to 1231/1237, integers per ``boxing`` (beyond
    64 bits as ``BigInteger``), floats as ``Double``, strings over UTF-16 code
    units, lists as ``List.hashCode`` and maps as ``Map.hashCode``.

    Raises:
        TypeError: the value has no JSON counterpart (bytes, sets, objects).
    """
    if value is None:
        return 0
    if isinstance(value, bool):
        return _TRUE_HASH if value else _FALSE_HASH
    if isinstance(value, int):
        if boxing is IntegerBoxing.INTEGER and _INT_MIN <= value <= _INT_MAX:
            return value
        if _LONG_MIN <= value <= _LONG_MAX:
            return _long_hash(value)
        return _big_integer_hash(value)
    if isinstance(value, float):
        if boxing is IntegerBoxing.INTEGER and math.isfinite(value):
            text = repr(value)  # the JSON text pystorm writes
            if len(text) > _DOUBLE_TEXT_MAX:
                return _big_decimal_hash(text)
        return _double_hash(value)
    if isinstance(value, str):
        return _string_hash(value)
    if isinstance(value, list | tuple):
        return _list_hash(value, boxing)
    if isinstance(value, Mapping):
        total = 0
        for key, item in value.items():
            total += java_hash(key, boxing) ^ java_hash(item, boxing)
        return _i32(total)
    kind = type(value).__name__
    msg = f"cannot compute Java's hashCode of {kind} {value!r}: not a JSON value"
    raise TypeError(msg)


def _list_hash(values: Sequence[Any], boxing: IntegerBoxing) -> int:
    result = 1
    for item in values:
        result = (31 * result + java_hash(item, boxing)) & _MASK32
    return _i32(result)


def fields_task_index(
    values: Sequence[Any], num_tasks: int, boxing: IntegerBoxing = IntegerBoxing.LONG
) -> int:
    """Return ``Math.floorMod(Arrays.deepHashCode(values), num_tasks)``.

    Raises:
        ValueError: ``num_tasks`` is not positive.
        TypeError: a value has no JSON counterpart.
    """
    if num_tasks <= 0:
        msg = f"num_tasks must be positive, not {num_tasks}"
        raise ValueError(msg)
    return _list_hash(values, boxing) % num_tasks  # Python's % is floorMod here


def route_hash(
    values: Sequence[Any], boxing: IntegerBoxing = IntegerBoxing.LONG
) -> int:
    """Return ``Arrays.deepHashCode(values)``: what a fields grouping routes by.

    A stateful bolt whose ``state_key`` differs from its grouping fields stores
    it with each key (:data:`sr3.state.ROUTE_FIELD`).

    Raises:
        TypeError: a value has no JSON counterpart.
    """
    return _list_hash(values, boxing)


def key_task_index(
    key: Sequence[Any],
    route: int | None,
    num_tasks: int,
    boxing: IntegerBoxing = IntegerBoxing.LONG,
) -> int:
    """Return the task among ``num_tasks`` a stateful bolt's key belongs to.

    It is the task a fields grouping sends the key's tuples to: by the key's
    stored ``route`` (:func:`route_hash` of its grouping values) when it has one,
    else by the key itself (the grouping values); an empty key is a global
    grouping's, the lowest task.

    Raises:
        ValueError: ``num_tasks`` is not positive.
        TypeError: a value has no JSON counterpart.
    """
    if num_tasks <= 0:
        msg = f"num_tasks must be positive, not {num_tasks}"
        raise ValueError(msg)
    if route is None:
        if not key:
            return 0
        route = _list_hash(key, boxing)
    return route % num_tasks  # Python's % is floorMod here


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
