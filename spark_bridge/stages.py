"""The Python functions Spark runs for bolts: per partition, keying, per group.

Each stage is a picklable callable holding only a :class:`ComponentRef`; the
first call in a Spark task loads the topology and hosts the bolt for that
partition (task index = Spark partition id). Every stage reads and writes
:data:`spark_bridge.rows.ROW_SCHEMA` rows.

- :class:`BoltStage` (``mapInPandas``): a stateless bolt over the emits of the
  components it subscribes to; state rows pass through untouched.
- :class:`KeyStage` (``mapInPandas``): computes the fields-grouping key of each
  emit a stateful bolt subscribes to (``encode_key`` of the grouping fields).
- :class:`StatefulStage` (``applyInPandasWithState``): one call per key and
  micro-batch; ``self.state`` is loaded from the GroupState (msgpack), every
  tuple runs through the bolt, emits are captured, and the key's new state is
  stored back in the GroupState and output as a state row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.state import GroupState

from spark_bridge.errors import ComponentError
from spark_bridge.hosting import BoltHost, Emit, loaded_topology, spark_task
from spark_bridge.rows import COLUMNS, EMIT, STATE, ComponentRef
from sr3.codec import decode_key, decode_value, encode_key, encode_value

__all__ = ["BoltStage", "KeyStage", "StatefulStage"]

Row = tuple[Any, ...]


def _frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _emit_rows(component: str, emits: list[Emit]) -> list[Row]:
    return [
        (component, e.stream, EMIT, encode_value(e.values), None, None) for e in emits
    ]


class _Stage:
    """Hosts the bolt lazily, once per Spark task."""

    def __init__(self, ref: ComponentRef) -> None:
        self.ref = ref
        topology = loaded_topology(ref.topology_path)
        self.inputs = frozenset(
            (sub.source, sub.stream)
            for sub in topology.components[ref.component].inputs
        )
        self._host: BoltHost | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"ref": self.ref, "inputs": self.inputs, "_host": None}

    def host(self) -> BoltHost:
        if self._host is None:
            topology = loaded_topology(self.ref.topology_path)
            index, _batch = spark_task()
            self._host = BoltHost(topology, self.ref.component, index, self.ref.conf)
        return self._host

    def run(self, source: str, stream: str, encoded: bytes, where: str) -> list[Emit]:
        host = self.host()
        values = decode_value(encoded)
        tup = host.make_tuple(source, stream, values)
        try:
            return host.process(tup)
        except ComponentError:
            raise
        except Exception as exc:
            index, batch = spark_task()
            msg = (
                f"bolt {self.ref.component!r} failed on tuple {values!r} from "
                f"{source!r}/{stream!r} ({where}partition {index}, batch {batch}): "
                f"{type(exc).__name__}: {exc}; fix process() and restart the query "
                "from the same checkpoint"
            )
            raise ComponentError(msg) from exc


class BoltStage(_Stage):
    """``mapInPandas`` function of a stateless bolt."""

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Run the bolt on the emits it subscribes to; pass state rows through."""
        name = self.ref.component
        for frame in frames:
            out: list[Row] = []
            for row in frame.itertuples(index=False, name=None):
                component, stream, kind, values = row[0], row[1], row[2], row[3]
                if kind != EMIT:
                    out.append(row)
                elif (component, stream) in self.inputs:
                    emits = self.run(component, stream, values, "")
                    out.extend(_emit_rows(name, emits))
            yield _frame(out)


class KeyStage(_Stage):
    """``mapInPandas`` function adding the fields-grouping key of a stateful bolt."""

    def __init__(self, ref: ComponentRef) -> None:
        super().__init__(ref)
        topology = loaded_topology(ref.topology_path)
        fields: dict[tuple[str, str], tuple[int, ...]] = {}
        for sub in topology.components[ref.component].inputs:
            names = topology.components[sub.source].outputs[sub.stream].fields
            fields[(sub.source, sub.stream)] = tuple(
                names.index(f) for f in sub.grouping.fields
            )
        self.fields = fields

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "fields": self.fields}

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Keep the emits the bolt subscribes to, each with its encoded key."""
        for frame in frames:
            out: list[Row] = []
            for row in frame.itertuples(index=False, name=None):
                component, stream, kind, values = row[0], row[1], row[2], row[3]
                indexes = self.fields.get((component, stream))
                if kind != EMIT or indexes is None:
                    continue
                decoded = decode_value(values)
                key = encode_key(tuple(decoded[i] for i in indexes))
                out.append((component, stream, kind, values, key, None))
            yield _frame(out)


class StatefulStage(_Stage):
    """``applyInPandasWithState`` function of a stateful bolt."""

    def __call__(
        self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        """Run the bolt on one key's tuples of a micro-batch, ``self.state`` scoped.

        Raises:
            ComponentError: ``process`` raised, or ``state_key`` disagrees with the
                fields-grouping key Spark grouped by.
        """
        encoded = bytes(key[0])
        state_key = decode_key(encoded)
        host = self.host()
        scoped = host.instance.keyed_state.for_key(state_key)
        scoped.clear()
        if state.exists:
            scoped.update(decode_value(state.get[0]))
        where = f"key {list(state_key)!r}, "
        out: list[Row] = []
        try:
            for frame in frames:
                for row in frame.itertuples(index=False, name=None):
                    component, stream, values = row[0], row[1], row[3]
                    self._check_key(host, component, stream, values, encoded, where)
                    emits = self.run(component, stream, values, where)
                    out.extend(_emit_rows(self.ref.component, emits))
            fields = dict(scoped)
        finally:
            scoped.clear()
        blob = encode_value(fields) if fields else None
        if blob is None:
            if state.exists:
                state.remove()
        else:
            state.update((blob,))
        out.append((self.ref.component, "", STATE, None, encoded, blob))
        yield _frame(out)

    def _check_key(
        self,
        host: BoltHost,
        component: str,
        stream: str,
        values: bytes,
        encoded: bytes,
        where: str,
    ) -> None:
        tup = host.make_tuple(component, stream, decode_value(values))
        if encode_key(tuple(host.instance.state_key(tup))) != encoded:
            index, batch = spark_task()
            msg = (
                f"bolt {self.ref.component!r}: state_key() of {list(tup.values)!r} "
                f"differs from its fields grouping ({where}partition {index}, batch "
                f"{batch}); on Spark the state key must be the grouping fields: "
                "drop the state_key override or group by the fields it uses"
            )
            raise ComponentError(msg)
