"""The stateful bolt stage: one call per key and micro-batch, in two Spark forms.

:class:`StatefulStage` is the ``applyInPandasWithState`` function (a topology
with one stateful bolt: Update mode); :class:`KeyedProcessor` wraps the same
stage as a ``transformWithStateInPandas`` processor (two or more stateful
bolts: Append mode, RocksDB state store). Both run :meth:`StatefulStage.apply`:

1. a pseudo-keyed group (see :func:`spark_bridge.stages.is_pseudo_key`) is
   passed through, and no state is read or written; a tick group (the last
   of its partition, see :mod:`spark_bridge.ticks`) ticks the task instances
   the partition hosted, when Storm would tick the bolt;
2. otherwise the rows are sorted by ``seq``; the bolt's restore rows install
   the key's state when Spark holds none for it; the key runs on the task
   Storm's fields grouping sends it to: by its grouping values, or, for a bolt
   overriding ``state_key``, by its route (:mod:`spark_bridge.statekeys`),
   which is stored with the key's fields;
3. each emit runs through the bolt with ``self.state`` scoped to the key (under
   the dead-letter policy, a failing tuple becomes a dead row, its emits are
   dropped and the key's state goes back to a deep copy taken before it);
4. a state row is output only when the key's encoded state differs from what
   it was before the first tuple (restored state included), null when the key
   was deleted; Spark's state is updated whenever it differs from what Spark
   held (so restored state is kept even when no tuple changed it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from spark_bridge.errors import ComponentError
from spark_bridge.rows import (
    EMIT,
    RESTORE,
    STATE,
    STATE_SCHEMA,
    ComponentRef,
    Routing,
)
from spark_bridge.stages import (
    ROWS_COLUMN,
    BoltStageBase,
    frame_of,
    is_pseudo_key,
    unpack,
)
from spark_bridge.statekeys import StateKeys
from spark_bridge.ticks import is_tick_key
from spark_bridge.worker import spark_task, topology_of
from sr3.codec import decode_key, decode_value, encode_value
from sr3.key_state import ROUTE_FIELD
from topology_api.contract import overrides_state_key

__all__ = ["KeyedProcessor", "StatefulStage"]

Row = tuple[Any, ...]


def _order(row: Row) -> tuple[str, str, str, bytes]:
    # seq orders causally; the rest only makes ties (two spouts) deterministic.
    return (row[6] or "", row[0] or "", row[1] or "", row[3] or b"")


class StatefulStage(BoltStageBase):
    """``applyInPandasWithState`` function of a stateful bolt."""

    _ticked = False

    def __init__(
        self, ref: ComponentRef, routing: Routing, *, on_error: str | None = None
    ) -> None:
        super().__init__(ref, routing, on_error=on_error)
        cls = topology_of(ref).components[ref.component].component_cls
        #: routes of a bolt overriding ``state_key`` (None: keyed by grouping)
        self.keys = StateKeys(ref) if overrides_state_key(cls) else None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_ticked": False}

    def tick(self) -> list[Row]:
        """Tick the task instances this Spark task hosted; return their emits.

        The first tick group of a partition ticks them (after every key of
        the partition, see :mod:`spark_bridge.ticks`); later ones do nothing.
        ``self.state`` is not bound during ``process_tick``, as on Storm.

        Raises:
            ComponentError: ``process_tick`` raised under the fail policy.
        """
        if self._ticked:
            return []
        self._ticked = True
        return self.flush()

    def __call__(
        self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        """Run one key's rows of a micro-batch (see the module docstring).

        Raises:
            ComponentError: ``process`` raised under the fail policy, or the
                key's tuples go to two tasks.
        """
        gkey = bytes(key[0])
        if is_pseudo_key(gkey):
            yield frame_of(_rows(frames))
            return
        if is_tick_key(gkey):
            yield frame_of(self.tick())
            return
        stored = bytes(state.get[0]) if state.exists else None
        out, blob, write = self.apply(gkey, frames, stored)
        if write:
            if blob is None:
                state.remove()
            else:
                state.update((blob,))
        yield frame_of(out)

    def apply(
        self, encoded: bytes, frames: Iterator[pd.DataFrame], stored: bytes | None
    ) -> tuple[list[Row], bytes | None, bool]:
        """Process one real key's rows given its stored state blob.

        Returns:
            Output rows, the key's new state blob (None: no state), and whether
            Spark's state must be written (or removed, when the blob is None).

        Raises:
            ComponentError: ``process`` raised under the fail policy, or the
                key's tuples go to two tasks (see :meth:`_split`).
        """
        rows = sorted(_rows(frames), key=_order)
        name = self.ref.component
        state_key = decode_key(encoded)
        previous: dict[str, Any] | None = None
        if stored is not None:
            previous = decode_value(stored)
        else:
            restored = [r for r in rows if r[2] == RESTORE and r[5] is not None]
            if restored:
                previous = decode_value(restored[0][5])
        keys = self.keys
        route = None if keys is None else _first_route(keys, rows, previous)
        # the task Storm's fields grouping sends the key to (its context, index)
        host = self.host(self.task_of(state_key, route))
        if keys is not None and previous is not None:
            stored_route = previous.get(ROUTE_FIELD)
            if isinstance(stored_route, int):
                other = keys.task(state_key, stored_route)
                if other != host.index:
                    raise self._split(keys, state_key, other, host.index)
        where = f"key {list(state_key)!r}, "
        scoped = host.instance.keyed_state.for_key(state_key, route)
        # the stored entry as it is: a routed key's route included
        scoped.restore(previous or None)
        baseline = encode_value(previous) if previous else None
        out: list[Row] = []
        rollback = self.on_error == "dead-letter"
        try:
            for row in rows:
                if row[2] != EMIT:
                    continue
                if keys is not None:
                    scoped.route = self._route(keys, row, state_key, host.index)
                # Dead-letter rolls the key back to before the failing tuple.
                before = scoped.saved() if rollback else None
                emitted, failed = self.process(
                    [host], row, key=encoded, where=where, scoped=scoped
                )
                if failed:
                    scoped.restore(before)
                out.extend(emitted)
            # a routed key's entry holds its route (hidden from dict(scoped))
            fields = dict(scoped) if keys is None else scoped.saved()
        finally:
            scoped.clear()
        blob = encode_value(fields) if fields else None
        if blob != baseline:
            out.append((name, "", STATE, None, encoded, blob, ""))
        return out, blob, blob != stored

    def _route(
        self, keys: StateKeys, row: Row, state_key: tuple[Any, ...], index: int
    ) -> int:
        """Return the route of ``row``, which must send it to task ``index``.

        Raises:
            ComponentError: the row's grouping values send it to another task
                (see :meth:`_split`).
        """
        route = keys.route(row)
        other = keys.task(state_key, route)
        if other != index:
            raise self._split(keys, state_key, index, other)
        return route

    def _split(
        self, keys: StateKeys, state_key: tuple[Any, ...], index: int, other: int
    ) -> ComponentError:
        """The error of a state key whose tuples go to two tasks.

        Storm would keep one state of the key per task, Spark keeps one.
        """
        partition, batch = spark_task()
        fields = sorted({f for names in keys.names.values() for f in names})
        msg = (
            f"bolt {self.ref.component!r}: state key {list(state_key)!r} gets "
            f"tuples its fields grouping sends to tasks {index} and {other} "
            f"(partition {partition}, batch {batch}); Storm would keep one state "
            "of the key per task, Spark keeps one: make state_key() include the "
            f"grouping fields {fields}"
        )
        return ComponentError(msg)


def _first_route(
    keys: StateKeys, rows: list[Row], previous: dict[str, Any] | None
) -> int | None:
    """Return the route the key's task is picked by: its first tuple's, else stored."""
    for row in rows:
        if row[2] == EMIT:
            return keys.route(row)
    if previous is None:
        return None
    route = previous.get(ROUTE_FIELD)
    return route if isinstance(route, int) else None


def _rows(frames: Iterator[pd.DataFrame]) -> list[Row]:
    # each input row is a pack of the key's rows (spark_bridge.stages.KeyStage)
    rows: list[Row] = []
    for frame in frames:
        for blob in frame[ROWS_COLUMN].tolist():
            rows.extend(unpack(blob))
    return rows


class KeyedProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor running a :class:`StatefulStage`.

    The key's fields live in one value state, ``sr3_state`` (msgpack blob).
    """

    def __init__(self, stage: StatefulStage) -> None:
        self.stage = stage
        self._state: Any = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the value state holding the key's fields."""
        self._state = handle.getValueState("sr3_state", STATE_SCHEMA)

    def handleInputRows(  # noqa: N802 (Spark's name)
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Run one key's rows of a micro-batch (see the module docstring)."""
        del timerValues
        gkey = bytes(key[0])
        if is_pseudo_key(gkey):
            yield frame_of(_rows(rows))
            return
        if is_tick_key(gkey):
            yield frame_of(self.stage.tick())
            return
        value = self._state
        stored = bytes(value.get()[0]) if value.exists() else None
        out, blob, write = self.stage.apply(gkey, rows, stored)
        if write:
            if blob is None:
                value.clear()
            else:
                value.update((blob,))
        yield frame_of(out)

    def close(self) -> None:
        """Nothing to release: hosted bolts live as long as the Python worker."""
