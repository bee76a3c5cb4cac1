"""Java's ``hashCode`` of values as Storm's JSON parser decodes them.

What a fields grouping routes by on Storm: ``Arrays.deepHashCode`` of the
selected values, each boxed as Storm's multilang JSON parser boxes it. How JSON
integers become Java objects changed with Storm 2.6 (json-simple to json-smart),
and with it the hash of negative integers: see :class:`IntegerBoxing`. A
stateful bolt's keys are placed on tasks by the same hash
(:func:`key_task_index`), so state follows its tuples across rescales.
"""

from __future__ import annotations

import decimal
import enum
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sr3.config import read_setting

__all__ = [
    "INTEGER_BOXING_KEY",
    "IntegerBoxing",
    "fields_task_index",
    "java_hash",
    "key_task_index",
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
