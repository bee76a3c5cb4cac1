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
   the key's state when Spark holds none for it;
3. each emit runs through the bolt with ``self.state`` scoped to the key (under
   the dead-letter policy, a failing tuple becomes a dead row, its emits are
   dropped and the key's state goes back to a deep copy taken before it);
4. a state row is output only when the key's encoded state differs from what
   it was before the first tuple (restored state included), null when the key
   was deleted; Spark's state is updated whenever it differs from what Spark
   held (so restored state is kept even when no tuple changed it).
"""

from __future__ import annotations

import copy
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
from spark_bridge.hosting import BoltHost, spark_task
from spark_bridge.rows import EMIT, RESTORE, STATE, STATE_SCHEMA
from spark_bridge.stages import (
    ROWS_COLUMN,
    BoltStageBase,
    frame_of,
    is_pseudo_key,
    unpack,
)
from spark_bridge.ticks import is_tick_key
from sr3.codec import decode_key, decode_value, encode_key, encode_value

__all__ = ["KeyedProcessor", "StatefulStage"]

Row = tuple[Any, ...]


def _order(row: Row) -> tuple[str, str, str, bytes]:
    # seq orders causally; the rest only makes ties (two spouts) deterministic.
    return (row[6] or "", row[0] or "", row[1] or "", row[3] or b"")


class StatefulStage(BoltStageBase):
    """``applyInPandasWithState`` function of a stateful bolt."""

    _ticked = False

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
            ComponentError: ``process`` raised under the fail policy, or
                ``state_key`` disagrees with the fields-grouping key.
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
        """
        rows = sorted(_rows(frames), key=_order)
        name = self.ref.component
        state_key = decode_key(encoded)
        # the task Storm's fields grouping sends the key to (its context, index)
        host = self.host(self.task_of(state_key))
        where = f"key {list(state_key)!r}, "
        scoped = host.instance.keyed_state.for_key(state_key)
        scoped.clear()
        if stored is not None:
            scoped.update(decode_value(stored))
        else:
            restored = [r for r in rows if r[2] == RESTORE and r[5] is not None]
            if restored:
                scoped.update(decode_value(restored[0][5]))
        baseline = encode_value(dict(scoped)) if len(scoped) else None
        out: list[Row] = []
        # Spark grouped by the fields-grouping values: only an overridden
        # state_key() can disagree with them.
        check = not host.keyed_by_grouping
        rollback = self.on_error == "dead-letter"
        try:
            for row in rows:
                if row[2] != EMIT:
                    continue
                if check:
                    self._check_key(host, row, encoded, where)
                # Dead-letter rolls the key back to before the failing tuple.
                before = copy.deepcopy(dict(scoped)) if rollback else {}
                emitted, failed = self.process(
                    [host], row, key=encoded, where=where, scoped=scoped
                )
                if failed:
                    scoped.clear()
                    scoped.update(before)
                out.extend(emitted)
            fields = dict(scoped)
        finally:
            scoped.clear()
        blob = encode_value(fields) if fields else None
        if blob != baseline:
            out.append((name, "", STATE, None, encoded, blob, ""))
        return out, blob, blob != stored

    def _check_key(self, host: BoltHost, row: Row, encoded: bytes, where: str) -> None:
        tup = host.make_tuple(row[0], row[1], decode_value(row[3]), row[4])
        if encode_key(tuple(host.instance.state_key(tup))) != encoded:
            index, batch = spark_task()
            msg = (
                f"bolt {self.ref.component!r}: state_key() of {list(tup.values)!r} "
                f"differs from its fields grouping ({where}partition {index}, batch "
                f"{batch}); on Spark the state key must be the grouping fields: "
                "drop the state_key override or group by the fields it uses"
            )
            raise ComponentError(msg)


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
