"""The state of one key: a view on its entry in a key group, tracking changes.

:class:`KeyState` is what a bolt's ``self.state`` is while it processes a tuple:
a dict of field name to value scoped to the tuple's key, whose writes (and reads
of mutable values) mark the key changed so an incremental snapshot encodes it.
:class:`sr3.state.KeyedState` hands these views out. A key's stored entry may
carry its route (:data:`ROUTE_FIELD`), hidden from the view.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, MutableMapping
from typing import Any, Final

__all__ = ["ROUTE_FIELD", "Group", "KeyState"]

Group = dict[bytes, dict[str, Any]]
"""A decoded key group: encoded key -> the key's fields."""


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
