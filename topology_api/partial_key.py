"""Storm's ``PartialKeyGrouping`` as a streamparse topology can declare it.

streamparse has no partial-key helper; ``Grouping.custom_object`` can name
Storm's class, but Thrift's ``JavaObject`` passes only primitives and strings to
a constructor, never a ``Fields``. So :func:`partial_key_grouping` gives either

* with no fields, ``custom_object`` of the no-argument constructor: it keys each
  tuple by its *first value*, as the bytes of its Java ``toString()``
  (``String.getBytes()``, UTF-8 on the JVMs we run);
* with fields, ``custom_serialized``: the Java serialization of
  ``new PartialKeyGrouping(new Fields(...))`` (:mod:`topology_api.java_serial`),
  keyed by the big-endian ``hashCode`` of each selected value.

Storm 2.8.3's default parts, reproduced so that the same sender emitting the
same sequence picks the same tasks:

* ``RandomTwoTaskAssignmentCreator``: a ``java.util.Random`` seeded with
  ``Arrays.hashCode(keyBytes)`` draws two task positions among the sorted
  targets (the second moved one on if it equals the first);
* ``BalancedTargetSelector``: of the two, the task this sender sent fewer
  tuples so far, the first one on a tie.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from typing import Any, Final

from streamparse import Grouping

from topology_api.java_serial import serialize_partial_key

__all__ = [
    "PARTIAL_KEY_CLASS",
    "BalancedSelector",
    "java_random_ints",
    "first_value_key",
    "java_to_string",
    "partial_key_grouping",
    "two_task_assignment",
]

#: The Java class streamparse's ``Grouping.custom_object`` must name.
PARTIAL_KEY_CLASS: Final = "org.apache.storm.grouping.PartialKeyGrouping"

_MASK32: Final = 0xFFFFFFFF
_MASK48: Final = (1 << 48) - 1
_MULTIPLIER: Final = 0x5DEECE66D
_ADDEND: Final = 0xB
#: ``Double.toString`` writes plain decimals in [1e-3, 1e7), else ``d.dddE±n``.
_PLAIN_MIN, _PLAIN_MAX = 1e-3, 1e7


def partial_key_grouping(*fields: str) -> Any:
    """Return the streamparse grouping of Storm's ``PartialKeyGrouping``.

    Each tuple is keyed by ``fields`` (by its first value when none are given)
    and goes to one of that key's two candidate tasks, the less loaded one from
    this sender. Runs on Storm and on the local cluster alike.

    Raises:
        ValueError: a field is named twice.
    """
    if not fields:
        return Grouping.custom_object(PARTIAL_KEY_CLASS, [])
    return Grouping.custom_serialized(serialize_partial_key(fields))


def _i32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _java_double(value: float) -> str:
    # Double.toString over Python's shortest repr digits; Java 17 agrees except
    # for rare values it writes one digit longer
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or _PLAIN_MIN <= abs(value) < _PLAIN_MAX:
        return repr(value)  # plain there, with a point: "100.0", "-0.0"
    sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    shift = exponent if isinstance(exponent, int) else 0  # finite: an int
    power = shift + len(digits) - 1
    minus = "-" if sign else ""
    return f"{minus}{text[0]}.{text[1:] or '0'}E{power}"


def java_to_string(value: Any) -> str:
    """Return Java's ``toString()`` of a JSON-decoded first value.

    Strings are themselves, integers their decimal digits, booleans
    ``true``/``false``, floats as ``Double.toString`` (``1.0E300``). Not
    reproduced: the rare doubles Java 17 writes with one more digit, and a
    decimal Storm >= 2.6 reads as ``BigDecimal`` (JSON text over 18
    characters) written with an exponent.

    Raises:
        ValueError: ``None`` (Storm's grouping throws a NullPointerException,
            killing the worker) or a list or map (Storm writes those as
            json-smart text in ``HashMap`` order, which is not reproduced).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if value is None:
        msg = (
            "a partial-key grouping keys by the first value, which is None "
            "(Storm throws a NullPointerException); emit a non-null first value"
        )
        raise ValueError(msg)
    kind = type(value).__name__
    msg = (
        f"a partial-key grouping keys by the first value's Java toString; the "
        f"local cluster supports strings, numbers and booleans there, not {kind}"
    )
    raise ValueError(msg)


def _bytes_hash(data: bytes) -> int:
    # java.util.Arrays.hashCode(byte[]): 31-based over the signed bytes
    result = 1
    for byte in data:
        result = (31 * result + (byte - 256 if byte > 127 else byte)) & _MASK32
    return _i32(result)


def java_random_ints(seed: int, bound: int, count: int) -> list[int]:
    """Return ``count`` draws of ``new java.util.Random(seed).nextInt(bound)``.

    Raises:
        ValueError: ``bound`` is not positive.
    """
    if bound <= 0:
        msg = f"bound must be positive, not {bound}"
        raise ValueError(msg)
    state = (seed ^ _MULTIPLIER) & _MASK48

    def next31() -> int:
        nonlocal state
        state = (state * _MULTIPLIER + _ADDEND) & _MASK48
        return state >> 17

    draws: list[int] = []
    for _ in range(count):
        bits = next31()
        if bound & (bound - 1) == 0:
            draws.append((bound * bits) >> 31)
            continue
        value = bits % bound
        while _i32(bits - value + bound - 1) < 0:  # Java's int overflow check
            bits = next31()
            value = bits % bound
        draws.append(value)
    return draws


def first_value_key(value: Any) -> bytes:
    """Return the key bytes of the no-field grouping: ``toString()`` as UTF-8.

    Raises:
        ValueError: a value without a supported ``toString`` (see
            :func:`java_to_string`).
    """
    return java_to_string(value).encode("utf-8", "surrogatepass")


def two_task_assignment(target_tasks: Sequence[int], key: bytes) -> list[int]:
    """Return the two candidate tasks of a key, as Storm's default assigns them.

    ``target_tasks`` must be sorted ascending (Storm sorts them).

    Raises:
        ValueError: no targets.
    """
    if not target_tasks:
        msg = "a partial-key grouping needs at least one target task"
        raise ValueError(msg)
    first, second = java_random_ints(_bytes_hash(key), len(target_tasks), 2)
    if first == second:
        second = (second + 1) % len(target_tasks)
    return [target_tasks[first], target_tasks[second]]


class BalancedSelector:
    """Storm's ``BalancedTargetSelector``: the candidate sent the fewest tuples."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}

    def choose(self, candidates: Sequence[int]) -> int:
        """Return the least loaded candidate (the earlier one on a tie), counted."""
        chosen = min(candidates, key=lambda task: self._sent.get(task, 0))
        self._sent[chosen] = self._sent.get(chosen, 0) + 1
        return chosen
