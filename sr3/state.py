"""Keyed state of one task: key groups held lazily, changes tracked for deltas.

A task's state is split into key groups (see :mod:`sr3.keygroups`). Inside a key
group, entries are keyed by the *encoded* key (``codec.encode_key``), so installing
and merging blobs never decodes keys. A key group installed from a blob stays
encoded until a key in it is touched; then its blobs (a base and any deltas) are
decoded and folded once. Writes record the changed keys of their key group, so an
incremental snapshot encodes only those keys.

Checkpoint protocol: ``snapshot()`` captures the changes so far (changes made after
it are tracked separately), the caller writes the blobs, then ``mark_clean()``
forgets what the snapshot captured. If a snapshot is never confirmed, the next one
includes its changes again, so a failed checkpoint loses nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from sr3.codec import (
    BlobKind,
    blob_kind,
    decode_key,
    decode_key_group_raw,
    encode_key,
    encode_key_group_delta_raw,
    encode_key_group_raw,
    encode_value,
)
from sr3.errors import CodecError, StateError
from sr3.keygroups import key_group_of_encoded

__all__ = ["ROUTE_FIELD", "KeyState", "KeyedState", "StateStats"]

Blob = bytes | memoryview
Group = dict[bytes, dict[str, Any]]
_EMPTY_FULL = encode_key_group_raw({})


#: Field holding a key's route: the hash of the grouping values that send the
#: key's tuples to their task, kept only for a state key that differs from its
#: grouping fields, so that a rescale puts the key where its tuples go. Hidden
#: from the key's view (iteration, ``len``, :meth:`KeyedState.items`).
ROUTE_FIELD: Final = "\x00route"

_MISSING: Final = object()
#: Values a caller may mutate in place: reading one marks its key changed.
_MUTABLE = (list, dict, bytearray)
#: Values a shallow copy of a key's fields leaves safe from in-place changes.
_SCALARS: Final = frozenset({int, float, str, bytes, bool, type(None)})


class KeyState(MutableMapping[str, Any]):
    """The state of one key: a dict of field name to value.

    Writes (``[]=``, ``del``, ``setdefault``, ``pop``, ``update``, ``clear``) mark
    the key changed. Reading a list, dict or bytearray also marks it, because the
    caller may mutate it in place; reading other values does not. A key whose last
    field is removed is deleted. Values must be msgpack-able (tuples come back as
    lists); a snapshot names the key and field of any that is not.

    Attributes:
        key: The key this view is scoped to.
        route: The key's route (see :data:`ROUTE_FIELD`), stored with its fields;
            None when the key is its own route.
    """

    __slots__ = ("_encoded", "_group", "_marks", "key", "route")

    def __init__(  # noqa: PLR0913 (a view on one entry of a key group)
        self,
        key: tuple[Any, ...],
        encoded: bytes,
        group: Group,
        marks: set[bytes],
        route: int | None = None,
    ) -> None:
        self.key = key
        self._encoded = encoded
        self._group = group
        self._marks = marks
        self.route = route

    def __getitem__(self, name: str) -> Any:
        fields = self._group.get(self._encoded)
        if fields is None:
            raise KeyError(name)
        value = fields[name]
        if isinstance(value, _MUTABLE):
            self._marks.add(self._encoded)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        """Return the field's value, or ``default`` when absent."""
        fields = self._group.get(self._encoded)
        if fields is None:
            return default
        value = fields.get(name, _MISSING)
        if value is _MISSING:
            return default
        if isinstance(value, _MUTABLE):
            self._marks.add(self._encoded)
        return value

    def __setitem__(self, name: str, value: Any) -> None:
        fields = self._group.get(self._encoded)
        if fields is None:
            fields = self._group[self._encoded] = {}
        if self.route is not None:
            fields[ROUTE_FIELD] = self.route
        fields[name] = value
        self._marks.add(self._encoded)

    def __delitem__(self, name: str) -> None:
        fields = self._group.get(self._encoded)
        if fields is None:
            raise KeyError(name)
        del fields[name]
        if not fields or (len(fields) == 1 and ROUTE_FIELD in fields):
            del self._group[self._encoded]
        self._marks.add(self._encoded)

    def setdefault(self, name: str, default: Any = None) -> Any:
        """Return the field's value, first setting it to ``default`` when absent."""
        value = self.get(name, _MISSING)
        if value is _MISSING:
            self[name] = value = default
        return value

    def clear(self) -> None:
        """Remove every field: the key is deleted."""
        if self._group.pop(self._encoded, None) is not None:
            self._marks.add(self._encoded)

    def __contains__(self, name: object) -> bool:
        fields = self._group.get(self._encoded)
        return fields is not None and name in fields

    def __iter__(self) -> Iterator[str]:
        fields = self._group.get(self._encoded, {})
        if ROUTE_FIELD in fields:
            return (name for name in fields if name != ROUTE_FIELD)
        return iter(fields)

    def __len__(self) -> int:
        fields = self._group.get(self._encoded, {})
        return len(fields) - (ROUTE_FIELD in fields)

    def saved(self) -> dict[str, Any] | None:
        """Return a copy of this key's fields (None when absent) for :meth:`restore`.

        Values that could be mutated in place are copied deeply. The copy holds
        the key's route (:data:`ROUTE_FIELD`) too: it is the stored entry.
        """
        fields = self._group.get(self._encoded)
        if fields is None:
            return None
        if all(type(v) in _SCALARS for v in fields.values()):
            return dict(fields)
        return copy.deepcopy(fields)

    def restore(self, saved: dict[str, Any] | None) -> None:
        """Put back what :meth:`saved` returned: undo a failed tuple's changes."""
        if saved is None:
            if self._group.pop(self._encoded, None) is not None:
                self._marks.add(self._encoded)
            return
        self._group[self._encoded] = saved
        self._marks.add(self._encoded)

    def __repr__(self) -> str:
        return f"KeyState({self.key!r}, {dict(self)!r})"


@dataclass(frozen=True)
class StateStats:
    """Counters of a :class:`KeyedState`.

    Attributes:
        decoded_key_groups: Key groups held as Python objects.
        encoded_key_groups: Key groups still held as blobs (never touched).
        decoded_keys: Keys in the decoded key groups.
        dirty_key_groups: Key groups with changes not yet confirmed by ``mark_clean``.
        decodes: Key groups decoded since creation (lazy install's cost).
    """

    decoded_key_groups: int
    encoded_key_groups: int
    decoded_keys: int
    dirty_key_groups: int
    decodes: int


def _fold(blobs: Iterable[Blob]) -> Group:
    """Fold a base and deltas, oldest first, into one key group (no key decoding)."""
    entries: Group = {}
    for blob in blobs:
        part = decode_key_group_raw(blob)
        if part.kind is BlobKind.FULL:
            entries = part.entries
            continue
        for key in part.deletes:
            entries.pop(key, None)
        entries.update(part.entries)
    return entries


class KeyedState:
    """Flink-like keyed state for one task (not thread-safe: the task's thread owns it).

    Args:
        key_group_count: G of the component.
        key_groups: Key groups this task holds (default: all of them); touching or
            installing another is an error.

    Raises:
        StateError: ``key_group_count < 1``.
    """

    def __init__(
        self, key_group_count: int, key_groups: Iterable[int] | None = None
    ) -> None:
        if key_group_count < 1:
            msg = f"key group count {key_group_count} is invalid; use 1..32768"
            raise StateError(msg)
        self._count = key_group_count
        self._held = None if key_groups is None else frozenset(key_groups)
        self._decoded: dict[int, Group] = {}
        self._encoded: dict[int, list[Blob]] = {}
        self._live: dict[int, set[bytes]] = {}
        self._captured: dict[int, set[bytes]] = {}
        self._decodes = 0

    @property
    def key_group_count(self) -> int:
        """G of the component."""
        return self._count

    def key_group_of(self, key: tuple[Any, ...]) -> int:
        """Return the key group of ``key``.

        Raises:
            StateError: the key cannot be encoded.
        """
        return key_group_of_encoded(self._encode_key(key), self._count)

    def for_key(self, key: tuple[Any, ...], route: int | None = None) -> KeyState:
        """Return the dict-like state of ``key`` (a bolt's ``self.state``).

        Args:
            key: The state key.
            route: The key's route when it is not the key itself (see
                :data:`ROUTE_FIELD`); written with the key's fields.

        Raises:
            StateError: the key cannot be encoded, or its key group is not held here.
        """
        encoded = self._encode_key(key)
        kg = key_group_of_encoded(encoded, self._count)
        group = self._decoded.get(kg)
        if group is None:
            group = self._materialize(kg, key)
        marks = self._live.get(kg)
        if marks is None:
            marks = self._live[kg] = set()
        return KeyState(key, encoded, group, marks, route)

    def install(self, blobs: Mapping[int, Blob], *, lazy: bool = True) -> None:
        """Install key-group blobs: FULL replaces a key group, DELTA applies to it.

        Call it once per shard, oldest epoch first. Installed blobs are committed
        state: a FULL blob also drops its key group's tracked changes, and views
        taken before it from ``for_key`` are stale. With ``lazy`` the blobs stay
        encoded until a key of their key group is touched; otherwise every
        installed key group is decoded now (the eager mode, for comparison).

        Raises:
            StateError: a key group is out of range or not held by this task.
            CodecError: a blob has an unknown version or kind, or (eager) is malformed.
        """
        for kg in sorted(blobs):
            blob = blobs[kg]
            self._check_held(kg, None)
            if blob_kind(blob) is BlobKind.FULL:
                self._decoded.pop(kg, None)
                self._encoded[kg] = [blob]
                self._live.pop(kg, None)
                self._captured.pop(kg, None)
            elif kg in self._decoded:
                self._decoded[kg] = _fold_into(self._decoded[kg], blob)
            else:
                self._encoded.setdefault(kg, []).append(blob)
            if not lazy and kg in self._encoded:
                self._materialize(kg, None)

    def snapshot(self, *, incremental: bool) -> dict[int, bytes]:
        """Encode the state for a checkpoint, capturing the changes it contains.

        Incremental: one DELTA blob per key group changed since the last confirmed
        snapshot, with the changed keys as upserts and removed keys as deletes.
        Full: one FULL blob per non-empty key group; key groups never touched are
        re-used as encoded, without decoding.

        Raises:
            StateError: a value cannot be encoded; the message names key and field.
        """
        for kg, marks in self._live.items():
            if marks:
                self._captured.setdefault(kg, set()).update(marks)
                marks.clear()
        out: dict[int, bytes] = {}
        if incremental:
            for kg, marks in sorted(self._captured.items()):
                group = self._decoded[kg]
                keys = sorted(marks)
                upserts = {k: group[k] for k in keys if k in group}
                deletes = [k for k in keys if k not in group]
                out[kg] = self._encode(upserts, deletes)
            return out
        for kg, group in self._decoded.items():
            if group:
                out[kg] = self._encode(group, None)
        for kg, pending in self._encoded.items():
            blob = self._compact(kg, pending)
            if blob != _EMPTY_FULL:
                out[kg] = blob
        return dict(sorted(out.items()))

    def mark_clean(self) -> None:
        """Forget the changes captured by the snapshots taken so far (they are durable).

        Changes made after the last ``snapshot()`` stay tracked.
        """
        self._captured.clear()

    def items(self) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """Yield every ``(key, {field: value})``, in key-group order.

        Encoded key groups are decoded for the iteration only and stay encoded.
        Yielded field dicts are copies, without the keys' routes: write through
        ``for_key``.
        """
        for key, _route, fields in self.routed_items():
            yield key, fields

    def routed_items(
        self,
    ) -> Iterator[tuple[tuple[Any, ...], int | None, dict[str, Any]]]:
        """Yield every ``(key, route, {field: value})`` (see :meth:`items`).

        ``route`` is the key's stored route (:data:`ROUTE_FIELD`), None when the
        key routes itself.
        """
        for kg in self.key_groups_present():
            group = self._decoded.get(kg)
            if group is None:
                group = _fold(self._encoded[kg])
            for encoded, stored in group.items():
                fields = dict(stored)
                route = fields.pop(ROUTE_FIELD, None)
                yield decode_key(encoded), route, fields

    def key_groups_present(self) -> list[int]:
        """Return the key groups holding state; encoded key groups always count."""
        present = {kg for kg, group in self._decoded.items() if group}
        return sorted(present.union(self._encoded))

    def stats(self) -> StateStats:
        """Return counters: decoded versus encoded key groups, dirty ones, decodes."""
        dirty = {kg for kg, marks in self._live.items() if marks}
        dirty.update(kg for kg, marks in self._captured.items() if marks)
        return StateStats(
            decoded_key_groups=len(self._decoded),
            encoded_key_groups=len(self._encoded),
            decoded_keys=sum(len(group) for group in self._decoded.values()),
            dirty_key_groups=len(dirty),
            decodes=self._decodes,
        )

    def _encode_key(self, key: tuple[Any, ...]) -> bytes:
        try:
            return encode_key(key)
        except CodecError as exc:
            msg = f"state key {key!r} cannot be encoded; use str, int or bytes fields"
            raise StateError(msg) from exc

    def _check_held(self, kg: int, key: tuple[Any, ...] | None) -> None:
        if 0 <= kg < self._count and (self._held is None or kg in self._held):
            return
        what = f"key {key!r} is in key group {kg}" if key else f"key group {kg}"
        if not 0 <= kg < self._count:
            msg = f"{what}, outside 0..{self._count - 1}; is G the component's G?"
        else:
            held = sorted(self._held or ())
            span = f"{held[0]}..{held[-1]}" if held else "none"
            msg = (
                f"{what}, which this task does not hold (it holds {len(held)} key "
                f"groups, {span}); the grouping into this task and its key-group "
                "range disagree"
            )
        raise StateError(msg)

    def _materialize(self, kg: int, key: tuple[Any, ...] | None) -> Group:
        self._check_held(kg, key)
        pending = self._encoded.get(kg)
        group: Group = {}
        if pending is not None:
            try:
                group = _fold(pending)
            except CodecError as exc:
                msg = f"key group {kg} could not be decoded: {exc}"
                raise CodecError(msg) from exc
            del self._encoded[kg]
            self._decodes += 1
        self._decoded[kg] = group
        return group

    def _compact(self, kg: int, pending: list[Blob]) -> bytes:
        if len(pending) == 1 and blob_kind(pending[0]) is BlobKind.FULL:
            return bytes(pending[0])
        blob = encode_key_group_raw(_fold(pending))
        self._encoded[kg] = [blob]
        return blob

    @staticmethod
    def _encode(upserts: Group, deletes: list[bytes] | None) -> bytes:
        try:
            if deletes is None:
                return encode_key_group_raw(upserts)
            return encode_key_group_delta_raw(upserts, deletes)
        except CodecError as exc:
            raise _unencodable(upserts) from exc


def _fold_into(group: Group, delta: Blob) -> Group:
    part = decode_key_group_raw(delta)
    for key in part.deletes:
        group.pop(key, None)
    group.update(part.entries)
    return group


def _unencodable(entries: Group) -> StateError:
    """Name the first key and field whose value msgpack cannot encode."""
    for encoded, fields in entries.items():
        for name, value in fields.items():
            try:
                encode_value(name)
                encode_value(value)
            except CodecError:
                msg = (
                    f"state of key {decode_key(encoded)!r} field {name!r} holds a "
                    f"{type(value).__name__}, which cannot be snapshotted; store "
                    "str, bytes, int, float, bool, None, list or dict values"
                )
                return StateError(msg)
    msg = "state could not be encoded, though every field encodes on its own"
    return StateError(msg)
