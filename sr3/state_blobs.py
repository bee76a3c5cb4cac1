"""The pieces of :class:`sr3.state.KeyedState` that are not its bookkeeping.

Folding a key group's blobs (a base, then deltas, oldest first) without
decoding keys; naming the key and field a snapshot cannot encode; the
:class:`KeyGroupLoader` a deferred state takes its key groups from; and the
state's counters (:class:`StateStats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sr3.codec import (
    BlobKind,
    decode_key,
    decode_key_group_raw,
    encode_key_group_raw,
    encode_value,
)
from sr3.errors import CodecError, StateError
from sr3.key_state import Group

__all__ = [
    "EMPTY_FULL",
    "Blob",
    "KeyGroupLoader",
    "StateStats",
    "fold",
    "fold_into",
    "unencodable",
]

Blob = bytes | memoryview


class KeyGroupLoader(Protocol):
    """Where a deferred state's key groups come from (see :meth:`KeyedState.defer`).

    Both methods return key groups whose blobs have all arrived, each with its
    blobs oldest first (a base, then deltas); a key group is returned once.
    """

    def take(self, key_group: int) -> Mapping[int, list[Blob]]:
        """Return ``key_group`` (fetched now if need be) and any others arrived.

        Raises:
            RecoveryError, ShardNotFoundError: the key group cannot be read.
        """
        ...

    def take_all(self) -> Mapping[int, list[Blob]]:
        """Return every key group not returned yet, waiting for them.

        Raises:
            RecoveryError, ShardNotFoundError: a key group cannot be read.
        """
        ...


#: The FULL blob of an empty key group.
EMPTY_FULL = encode_key_group_raw({})


@dataclass(frozen=True)
class StateStats:
    """Counters of a :class:`KeyedState`.

    Attributes:
        decoded_key_groups: Key groups held as Python objects.
        encoded_key_groups: Key groups still held as blobs (never touched).
        decoded_keys: Keys in the decoded key groups.
        dirty_key_groups: Key groups with changes not yet confirmed by ``mark_clean``.
        decodes: Key groups decoded since creation (lazy install's cost).
        deferred_key_groups: Key groups still to come from the ring (a lazy
            restore, see :meth:`KeyedState.defer`).
    """

    decoded_key_groups: int
    encoded_key_groups: int
    decoded_keys: int
    dirty_key_groups: int
    decodes: int
    deferred_key_groups: int = 0


def fold(blobs: Iterable[Blob]) -> Group:
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


def fold_into(group: Group, delta: Blob) -> Group:
    """Apply one DELTA blob to a decoded key group, in place; return it."""
    part = decode_key_group_raw(delta)
    for key in part.deletes:
        group.pop(key, None)
    group.update(part.entries)
    return group


def unencodable(entries: Group) -> StateError:
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
