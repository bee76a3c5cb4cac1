"""Keyed state of one task: key groups held lazily, changes tracked for deltas.

A task's state is split into key groups (see :mod:`sr3.keygroups`). Inside a key
group, entries are keyed by the *encoded* key (``codec.encode_key``), so installing
and merging blobs never decodes keys. A key group installed from a blob stays
encoded until a key in it is touched; then its blobs (a base and any deltas) are
decoded and folded once. Writes record the changed keys of their key group, so an
incremental snapshot encodes only those keys. The view of one key that
:meth:`KeyedState.for_key` returns is :class:`sr3.key_state.KeyState`.

A restored state may be *deferred* (:meth:`KeyedState.defer`): its key groups
are still on the ring. Touching a key of a deferred key group first takes that
key group (its base and deltas, oldest first) from a :class:`KeyGroupLoader`,
which fetches it at once if its background load has not brought it yet; a
snapshot, an iteration or an install first takes every deferred key group, so
they always see the whole state.

Checkpoint protocol: ``snapshot()`` captures the changes so far (changes made after
it are tracked separately), the caller writes the blobs, then ``mark_clean()``
forgets what the snapshot captured. If a snapshot is never confirmed, the next one
includes its changes again, so a failed checkpoint loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sr3.codec import (
    BlobKind,
    blob_kind,
    decode_key,
    encode_key,
    encode_key_group_delta_raw,
    encode_key_group_raw,
)
from sr3.errors import CodecError, StateError
from sr3.key_state import ROUTE_FIELD, Group, KeyState
from sr3.keygroups import key_group_of_encoded
from sr3.state_blobs import (
    EMPTY_FULL,
    Blob,
    KeyGroupLoader,
    StateStats,
    fold,
    fold_into,
    unencodable,
)

# KeyState lives in sr3.key_state; it is re-exported here because
# storm_bridge/stateful.py and storm_bridge/kafka/sink.py import it from this
# module (it is the type of a bolt's ``self.state``).
__all__ = ["KeyGroupLoader", "KeyState", "KeyedState", "StateStats"]

# KeyGroupLoader and StateStats, in sr3.state_blobs, are part of this module's
# interface (the loader a deferred state takes, the counters it returns).


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
        self._deferred: set[int] = set()
        self._loader: KeyGroupLoader | None = None
        #: key groups the next snapshot writes whole even when incremental
        #: (handed over: installed, or dropped as an empty FULL blob)
        self._whole: set[int] = set()
        self._whole_captured: set[int] = set()

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
                :data:`~sr3.key_state.ROUTE_FIELD`); written with the key's fields.

        Raises:
            StateError: the key cannot be encoded, or its key group is not held here.
        """
        encoded = self._encode_key(key)
        kg = key_group_of_encoded(encoded, self._count)
        if kg in self._deferred:
            self._arrive(kg)
        group = self._decoded.get(kg)
        if group is None:
            group = self._materialize(kg, key)
        marks = self._live.get(kg)
        if marks is None:
            marks = self._live[kg] = set()
        return KeyState(key, encoded, group, marks, route)

    @property
    def deferred(self) -> bool:
        """Whether key groups are still to come from the ring (see :meth:`defer`)."""
        return bool(self._deferred)

    def defer(self, key_groups: Iterable[int], loader: KeyGroupLoader) -> None:
        """Leave ``key_groups`` on the ring until they are needed.

        A key of one of them first takes its key group from ``loader``
        (:meth:`KeyGroupLoader.take`); :meth:`snapshot`, :meth:`install`,
        :meth:`items` and :meth:`key_groups_present` first take every one left
        (:meth:`KeyGroupLoader.take_all`), so they see the whole state. Call it
        on a fresh state, before any key is touched.

        Raises:
            StateError: the state already has key groups, or one is out of range.
        """
        if self._decoded or self._encoded or self._deferred:
            msg = "defer() needs a fresh state: key groups are already present"
            raise StateError(msg)
        wanted = set(key_groups)
        for kg in wanted:
            self._check_held(kg, None)
        self._deferred = wanted
        self._loader = loader if wanted else None

    def load_all(self) -> None:
        """Take every deferred key group now (nothing when none is deferred).

        Raises:
            RecoveryError, ShardNotFoundError: a key group cannot be read.
        """
        if self._deferred and self._loader is not None:
            self._absorb(self._loader.take_all(), None)

    def _arrive(self, kg: int) -> None:
        loader = self._loader
        if loader is None:  # defer() guarantees one; be loud if not
            msg = f"key group {kg} is deferred but no loader holds it"
            raise StateError(msg)
        self._absorb(loader.take(kg), kg)

    def _absorb(self, arrived: Mapping[int, list[Blob]], wanted: int | None) -> None:
        for kg in sorted(arrived):
            if kg not in self._deferred:
                continue
            self._deferred.discard(kg)
            for blob in arrived[kg]:
                self._install_one(kg, blob, lazy=True)
        missing = self._deferred if wanted is None else {wanted} & self._deferred
        if missing:
            shown = sorted(missing)[:5]
            msg = f"the loader did not deliver key groups {shown} it was asked for"
            raise StateError(msg)
        if not self._deferred:
            self._loader = None

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
        self.load_all()
        for kg in sorted(blobs):
            self._install_one(kg, blobs[kg], lazy=lazy)

    def _install_one(self, kg: int, blob: Blob, *, lazy: bool) -> None:
        self._check_held(kg, None)
        if blob_kind(blob) is BlobKind.FULL:
            self._decoded.pop(kg, None)
            self._encoded[kg] = [blob]
            self._live.pop(kg, None)
            self._captured.pop(kg, None)
        elif kg in self._decoded:
            self._decoded[kg] = fold_into(self._decoded[kg], blob)
        else:
            self._encoded.setdefault(kg, []).append(blob)
        if not lazy and kg in self._encoded:
            self._materialize(kg, None)

    def write_whole(self, key_groups: Iterable[int]) -> None:
        """Write ``key_groups`` whole (a FULL blob each) in the next snapshots.

        Until a snapshot holding them is confirmed (:meth:`mark_clean`), even an
        incremental snapshot holds each as a FULL blob, an empty one when it
        holds no state: a key group installed from another task is then whole
        in this task's chain, and one dropped is emptied there. Blobs of
        either kind fold oldest first (a FULL one replaces what came before).
        """
        self._whole.update(key_groups)

    def drop_key_groups(self, key_groups: Iterable[int]) -> int:
        """Forget ``key_groups`` (they moved to another task).

        Returns how many of them held state. Their tracked changes go too;
        the next snapshots write each as an empty FULL blob
        (:meth:`write_whole`).

        Raises:
            RecoveryError, ShardNotFoundError: a deferred key group cannot be read.
        """
        self.load_all()
        dropped = 0
        for kg in set(key_groups):
            held = self._decoded.pop(kg, None)
            encoded = self._encoded.pop(kg, None)
            dropped += bool(held) or encoded is not None
            self._live.pop(kg, None)
            self._captured.pop(kg, None)
        self.write_whole(key_groups)
        return dropped

    def snapshot(self, *, incremental: bool) -> dict[int, bytes]:
        """Encode the state for a checkpoint, capturing the changes it contains.

        Incremental: one DELTA blob per key group changed since the last confirmed
        snapshot, with the changed keys as upserts and removed keys as deletes.
        Full: one FULL blob per non-empty key group; key groups never touched are
        re-used as encoded, without decoding.

        A deferred state first takes every key group still on the ring
        (:meth:`load_all`): a full snapshot holds them, and a delta is taken
        only on a state whole again.

        Raises:
            StateError: a value cannot be encoded; the message names key and field.
            RecoveryError, ShardNotFoundError: a deferred key group cannot be read.
        """
        self.load_all()
        for kg, marks in self._live.items():
            if marks:
                self._captured.setdefault(kg, set()).update(marks)
                marks.clear()
        out: dict[int, bytes] = {}
        self._whole_captured |= self._whole
        self._whole = set()
        if incremental:
            for kg, marks in sorted(self._captured.items()):
                if kg in self._whole_captured:
                    continue
                group = self._decoded[kg]
                keys = sorted(marks)
                upserts = {k: group[k] for k in keys if k in group}
                deletes = [k for k in keys if k not in group]
                out[kg] = self._encode(upserts, deletes)
            for kg in sorted(self._whole_captured):
                out[kg] = self._whole_blob(kg)
            return dict(sorted(out.items()))
        for kg, group in self._decoded.items():
            if group:
                out[kg] = self._encode(group, None)
        for kg, pending in self._encoded.items():
            blob = self._compact(kg, pending)
            if blob != EMPTY_FULL:
                out[kg] = blob
        return dict(sorted(out.items()))

    def mark_clean(self) -> None:
        """Forget the changes captured by the snapshots taken so far (they are durable).

        Changes made after the last ``snapshot()`` stay tracked.
        """
        self._captured.clear()
        self._whole_captured.clear()

    def _whole_blob(self, kg: int) -> bytes:
        """Key group ``kg`` as one FULL blob (empty when it holds no state)."""
        group = self._decoded.get(kg)
        if group is not None:
            return self._encode(group, None)
        pending = self._encoded.get(kg)
        return EMPTY_FULL if pending is None else self._compact(kg, pending)

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

        ``route`` is the key's stored route (:data:`~sr3.key_state.ROUTE_FIELD`),
        None when the key routes itself.
        """
        self.load_all()
        for kg in self.key_groups_present():
            group = self._decoded.get(kg)
            if group is None:
                group = fold(self._encoded[kg])
            for encoded, stored in group.items():
                fields = dict(stored)
                route = fields.pop(ROUTE_FIELD, None)
                yield decode_key(encoded), route, fields

    def key_groups_present(self) -> list[int]:
        """Return the key groups holding state; encoded key groups always count."""
        self.load_all()
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
            deferred_key_groups=len(self._deferred),
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
                group = fold(pending)
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
        blob = encode_key_group_raw(fold(pending))
        self._encoded[kg] = [blob]
        return blob

    @staticmethod
    def _encode(upserts: Group, deletes: list[bytes] | None) -> bytes:
        try:
            if deletes is None:
                return encode_key_group_raw(upserts)
            return encode_key_group_delta_raw(upserts, deletes)
        except CodecError as exc:
            raise unencodable(upserts) from exc
