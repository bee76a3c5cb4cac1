"""Java serialization of ``PartialKeyGrouping(new Fields(...))``, for Thrift.

Thrift's ``JavaObject`` cannot pass a ``Fields`` to a constructor, but a
grouping may also travel as ``custom_serialized``: the bytes of
``ObjectOutputStream.writeObject`` that Storm's worker reads back. This module
writes exactly the bytes Storm 2.8.3's own ``Utils.javaSerialize`` gives for
that one object graph (checked byte for byte in the unit tests), and reads the
field names back out of such bytes (:func:`partial_key_fields`) for the local
cluster. It is no general Java serializer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

__all__ = ["partial_key_fields", "serialize_partial_key"]

_MAGIC: Final = b"\xac\xed\x00\x05"
_OBJECT, _CLASSDESC, _STRING, _REFERENCE, _NULL = b"s", b"r", b"t", b"q", b"p"
_END, _BLOCK = b"x", b"w"
_BASE_HANDLE: Final = 0x7E0000
_SERIALIZABLE, _WRITE_METHOD = 0x02, 0x01
_PKG: Final = "org.apache.storm.grouping.PartialKeyGrouping"
#: serialVersionUIDs of the classes in the graph, as Storm 2.8.3 on Java 17 writes
#: them (the default-computed ones of the nested classes included).
_UIDS: Final = {
    _PKG: -1672360572274911808,
    f"{_PKG}$RandomTwoTaskAssignmentCreator": -1597181344155445766,
    f"{_PKG}$BalancedTargetSelector": 6417541497755550517,
    "org.apache.storm.tuple.Fields": -3377931843059975424,
    "java.util.ArrayList": 8683452581122892189,
    "java.util.HashMap": 362498820763181265,
    "java.lang.Integer": 1360826667806852920,
    "java.lang.Number": -8742448824652078965,
}
_MAX_UTF: Final = 0xFFFF
_LOAD_FACTOR: Final = 0.75
_DEFAULT_CAPACITY: Final = 16


def _modified_utf8(text: str) -> bytes:
    out = bytearray()
    units = text.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", units):
        if 0 < unit < 0x80:  # noqa: PLR2004
            out.append(unit)
        elif unit < 0x800:  # noqa: PLR2004
            out += bytes([0xC0 | unit >> 6, 0x80 | unit & 0x3F])
        else:
            out += bytes(
                [0xE0 | unit >> 12, 0x80 | unit >> 6 & 0x3F, 0x80 | unit & 0x3F]
            )
    return bytes(out)


def _from_modified_utf8(data: bytes) -> str:
    # NUL is two bytes, a non-BMP character two 3-byte surrogates (CESU-8)
    text = data.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")


def _utf(text: str) -> bytes:
    data = _modified_utf8(text)
    if len(data) > _MAX_UTF:
        msg = f"field name of {len(data)} bytes: over Java's {_MAX_UTF} for a string"
        raise ValueError(msg)
    return struct.pack(">H", len(data)) + data


def _string_hash(text: str) -> int:
    result = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        result = (31 * result + unit) & 0xFFFFFFFF
    return result


class _Writer:
    """An ``ObjectOutputStream`` for this graph: handles, strings, class descs."""

    def __init__(self) -> None:
        self.out = bytearray(_MAGIC)
        self._next = 0
        self._handles: dict[str, int] = {}

    def _assign(self, key: str | None = None) -> None:
        if key is not None:
            self._handles[key] = self._next
        self._next += 1

    def _ref(self, key: str) -> bool:
        handle = self._handles.get(key)
        if handle is None:
            return False
        self.out += _REFERENCE + struct.pack(">i", _BASE_HANDLE + handle)
        return True

    def string(self, text: str, key: str) -> None:
        if not self._ref(key):
            self.out += _STRING + _utf(text)
            self._assign(key)

    def classdesc(
        self,
        name: str,
        fields: Sequence[tuple[str, str]],
        *,
        write_method: bool = False,
        parent: tuple[str, Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        """Fields as (type code or ``L...;`` signature, name), in Java's order."""
        if self._ref(f"class:{name}"):
            return
        flags = _SERIALIZABLE | (_WRITE_METHOD if write_method else 0)
        self.out += _CLASSDESC + _utf(name) + struct.pack(">qBH", _UIDS[name], flags,
                                                          len(fields))  # fmt: skip
        self._assign(f"class:{name}")
        for kind, field in fields:
            self.out += (kind[0] if len(kind) == 1 else "L").encode() + _utf(field)
            if len(kind) > 1:
                self.string(kind, f"sig:{kind}")
        self.out += _END
        if parent is None:
            self.out += _NULL
        else:
            self.classdesc(parent[0], parent[1])

    def new_object(self) -> None:
        self.out += _OBJECT

    def assign_object(self) -> None:
        self._assign()

    def raw(self, fmt: str, *values: object) -> None:
        self.out += struct.pack(fmt, *values)


def _hash_map(w: _Writer, keys: Sequence[str]) -> None:
    w.new_object()
    w.classdesc("java.util.HashMap", [("F", "loadFactor"), ("I", "threshold")],
                write_method=True)  # fmt: skip
    w.assign_object()
    capacity = _DEFAULT_CAPACITY
    while keys and len(keys) > capacity * _LOAD_FACTOR:
        capacity *= 2
    threshold = int(capacity * _LOAD_FACTOR) if keys else 0
    w.raw(">fi", _LOAD_FACTOR, threshold)
    w.out += _BLOCK + bytes([8])
    w.raw(">ii", capacity, len(keys))

    def bucket(key: str) -> int:
        h = _string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    # iteration order: by bucket, insertion order within one
    order = sorted(range(len(keys)), key=lambda i: (bucket(keys[i]), i))
    for position in order:
        w.string(keys[position], f"field:{keys[position]}")
        w.new_object()
        w.classdesc("java.lang.Integer", [("I", "value")],
                    parent=("java.lang.Number", []))  # fmt: skip
        w.assign_object()
        w.raw(">i", position)
    w.out += _END


def serialize_partial_key(fields: Sequence[str]) -> bytes:
    """Return Java's serialization of ``new PartialKeyGrouping(new Fields(fields))``.

    Raises:
        ValueError: no fields, a field named twice (``Fields`` refuses it), or a
            name too long for a Java string constant.
    """
    names = list(fields)
    if not names:
        msg = "a partial-key grouping on fields needs at least one field name"
        raise ValueError(msg)
    if len(set(names)) != len(names):
        msg = f"duplicate field names in {names}"
        raise ValueError(msg)
    w = _Writer()
    w.new_object()
    w.classdesc(_PKG, [
        (f"L{_PKG.replace('.', '/')}$AssignmentCreator;", "assignmentCreator"),
        ("Lorg/apache/storm/tuple/Fields;", "fields"),
        ("Lorg/apache/storm/tuple/Fields;", "outFields"),
        (f"L{_PKG.replace('.', '/')}$TargetSelector;", "targetSelector"),
        ("Ljava/util/List;", "targetTasks"),
    ])  # fmt: skip
    w.assign_object()
    w.new_object()
    w.classdesc(f"{_PKG}$RandomTwoTaskAssignmentCreator", [])
    w.assign_object()
    w.new_object()
    fields_desc = [("Ljava/util/List;", "fields"), ("Ljava/util/Map;", "index")]
    w.classdesc("org.apache.storm.tuple.Fields", fields_desc)
    w.assign_object()
    w.new_object()
    w.classdesc("java.util.ArrayList", [("I", "size")], write_method=True)
    w.assign_object()
    w.raw(">i", len(names))
    w.out += _BLOCK + bytes([4])
    w.raw(">i", len(names))
    for name in names:
        w.string(name, f"field:{name}")
    w.out += _END
    _hash_map(w, names)
    w.out += _NULL  # outFields
    w.new_object()
    w.classdesc(
        f"{_PKG}$BalancedTargetSelector", [("Ljava/util/Map;", "targetTaskStats")]
    )
    w.assign_object()
    _hash_map(w, [])
    w.out += _NULL  # targetTasks
    return bytes(w.out)


def partial_key_fields(data: bytes) -> tuple[str, ...] | None:
    """Return the fields of a serialized ``PartialKeyGrouping(Fields)``, else None.

    The names are read from the ``ArrayList`` and the bytes accepted only if
    :func:`serialize_partial_key` gives them back exactly.
    """
    marker = _utf("java.util.ArrayList")
    start = data.find(marker)
    if not data.startswith(_MAGIC) or start < 0:
        return None
    # the ArrayList's desc: uid, flags, one field "size", end, null parent
    at = start + len(marker) + 8 + 1 + 2 + 1 + len(_utf("size")) + 2
    try:
        (size,) = struct.unpack_from(">i", data, at)
        at += 4 + 2 + 4  # the size, then a block of one int (the capacity)
        names: list[str] = []
        for _ in range(size):
            if data[at : at + 1] != _STRING:
                return None
            (length,) = struct.unpack_from(">H", data, at + 1)
            raw = data[at + 3 : at + 3 + length]
            names.append(_from_modified_utf8(raw))
            at += 3 + length
        fields = tuple(names)
        return fields if serialize_partial_key(fields) == data else None
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
