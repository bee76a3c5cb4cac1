"""The Python functions Spark runs for stateless bolts and for keying stateful ones.

Each stage is a picklable object holding plain data (a :class:`ComponentRef`,
the bolt's subscriptions and a :class:`Routing`); the first call in a Spark task
loads the topology and hosts the bolt (task index = Spark partition id). Every
stage reads :data:`spark_bridge.rows.ROW_SCHEMA` rows (as lists of tuples, one
list per Arrow record batch) and passes on the rows it does not consume: every
non-emit row, and the emit rows :class:`Routing` keeps.

- :class:`BoltStage`: a stateless bolt over the emits it subscribes to, in
  arrival order; an ALL subscription runs the tuple through one hosted bolt per
  task index.
- :class:`KeyStage`: before a stateful bolt, gives each row its group key
  ``gkey``: the fields-grouping key (``encode_key``) of each emit the bolt
  subscribes to and of its restore rows, and a pseudo key (a zero byte and a
  spread byte, never a msgpack array) for the rows it passes through. It yields
  :data:`KEYED_SCHEMA` rows: per group key, a msgpack array of that key's rows
  (:func:`pack`), so the shuffle and sort before the stateful stage move one row
  per key and record batch instead of one per tuple.
- :class:`FusedStages` (``mapInArrow``): consecutive stages in one Python pass,
  converting Arrow to tuples once on the way in and once on the way out.

The stateful stage itself is :mod:`spark_bridge.keyed`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import pandas as pd
import pyarrow as pa

from spark_bridge.errors import ComponentError
from spark_bridge.hosting import BoltHost, loaded_topology, spark_task, storm_conf
from spark_bridge.rows import (
    COLUMNS,
    DEAD,
    EMIT,
    RESTORE,
    ComponentRef,
    Row,
    record_batch,
    rows_of,
)
from sr3.codec import decode_value, encode_key, encode_value
from sr3.errors import ConfigError
from sr3.state import KeyState
from storm_bridge.topology import LoadedTopology

__all__ = [
    "GROUP_COLUMN",
    "KEYED_ARROW_SCHEMA",
    "KEYED_SCHEMA",
    "ON_ERROR_KEY",
    "ON_ERROR_POLICIES",
    "ROWS_COLUMN",
    "BoltStage",
    "BoltStageBase",
    "FusedStages",
    "KeyStage",
    "Routing",
    "Stage",
    "error_policy",
    "frame_of",
    "is_pseudo_key",
    "pack",
    "unpack",
]

#: Conf key choosing what a bolt's exception does.
ON_ERROR_KEY: Final = "sr3.on.error"
#: Allowed values of ``sr3.on.error``: fail the query, or divert to a dead row.
ON_ERROR_POLICIES: Final = ("fail", "dead-letter")
#: The column a stateful stage groups by (real key or pass-through pseudo key).
GROUP_COLUMN: Final = "gkey"
#: The column holding a packed msgpack array of one group key's rows.
ROWS_COLUMN: Final = "rows"
#: Schema of a :class:`KeyStage`'s output.
KEYED_SCHEMA: Final = f"{GROUP_COLUMN} binary, {ROWS_COLUMN} binary"
#: :data:`KEYED_SCHEMA` as an Arrow schema.
KEYED_ARROW_SCHEMA: Final = pa.schema(
    [(GROUP_COLUMN, pa.binary()), (ROWS_COLUMN, pa.binary())]
)
_PSEUDO_PREFIX: Final = b"\x00"
#: Pass-through rows spread over this many pseudo keys (so over partitions).
_PSEUDO_SPREAD: Final = 16
_PSEUDO_KEYS: Final = tuple(_PSEUDO_PREFIX + bytes([i]) for i in range(_PSEUDO_SPREAD))
#: A packed row holds at most this many rows.
_PACK_ROWS: Final = 4096
_ALL: Final = "ALL"


def error_policy(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> str:
    """Return the ``sr3.on.error`` policy of ``component`` (default ``"fail"``).

    Raises:
        ConfigError: the merged conf holds another value.
    """
    value = storm_conf(topology, component, overrides).get(ON_ERROR_KEY, "fail")
    if value not in ON_ERROR_POLICIES:
        msg = (
            f"component {component!r}: {ON_ERROR_KEY}={value!r} is not one of "
            f"{', '.join(ON_ERROR_POLICIES)}; fix the topology or component config"
        )
        raise ConfigError(msg)
    return str(value)


def is_pseudo_key(gkey: bytes) -> bool:
    """Return whether ``gkey`` is a pass-through pseudo key, not a state key."""
    return gkey[:1] == _PSEUDO_PREFIX


def pack(rows: Sequence[Row]) -> bytes:
    """Return ``rows`` as one msgpack array (a :data:`ROWS_COLUMN` value)."""
    return encode_value(rows)


def unpack(blob: bytes) -> list[Row]:
    """Return the rows :func:`pack` packed, as tuples."""
    return [tuple(row) for row in decode_value(blob)]


def frame_of(rows: Sequence[Row]) -> pd.DataFrame:
    """Return ``rows`` as a pandas frame of :data:`COLUMNS`."""
    return pd.DataFrame(list(rows), columns=list(COLUMNS))


@dataclass(frozen=True)
class Routing:
    """Which emit rows a stage passes on to later stages and the sink.

    Attributes:
        streams: ``(component, stream)`` pairs a later bolt subscribes to.
        sinks: Components nothing subscribes to: all their emits reach the sink.
    """

    streams: frozenset[tuple[str, str]]
    sinks: frozenset[str]

    def keeps(self, component: str, stream: str) -> bool:
        """Return whether an emit of ``component`` on ``stream`` is still needed."""
        return component in self.sinks or (component, stream) in self.streams


class Stage(Protocol):
    """One step of a :class:`FusedStages` pass."""

    def rows(self, batches: Iterator[list[Row]]) -> Iterator[list[Row]]:
        """Return the output rows of each input batch of rows."""
        ...


class BoltStageBase:
    """Hosts the bolt lazily, once per Spark task and task index."""

    def __init__(
        self, ref: ComponentRef, routing: Routing, *, on_error: str | None = None
    ) -> None:
        self.ref = ref
        self.routing = routing
        topology = loaded_topology(ref.topology_path)
        info = topology.components[ref.component]
        self.inputs = {
            (sub.source, sub.stream): sub.grouping.kind.value for sub in info.inputs
        }
        self.tasks = info.tasks
        self.on_error = on_error or error_policy(topology, ref.component, ref.conf)
        self._hosts: dict[int, BoltHost] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hosts": {}}

    def host(self, index: int | None = None) -> BoltHost:
        """Return the hosted bolt of task ``index`` (default: this partition's)."""
        if index is None:
            index = spark_task()[0]
        host = self._hosts.get(index)
        if host is None:
            topology = loaded_topology(self.ref.topology_path)
            host = BoltHost(topology, self.ref.component, index, self.ref.conf)
            self._hosts[index] = host
        return host

    def process(
        self,
        hosts: Sequence[BoltHost],
        row: Row,
        *,
        key: bytes | None,
        where: str,
        scoped: KeyState | None = None,
    ) -> tuple[list[Row], bool]:
        """Run the emit ``row`` through ``hosts``; return output rows and failure.

        The output is the bolt's kept emits (seq ``f"{seq}.{j:06d}"``) or, when
        ``process`` raised under the dead-letter policy, one dead row. With
        ``scoped`` (a stateful bolt's key state) ``process`` runs directly with
        ``self.state`` bound to it.

        Raises:
            ComponentError: ``process`` raised under the fail policy.
        """
        source, stream, encoded, seq = row[0], row[1], row[3], row[6] or ""
        name = self.ref.component
        values = decode_value(encoded)
        emitted: list[Row] = []
        try:
            for host in hosts:
                tup = host.make_tuple(source, stream, values)
                if scoped is None:
                    emits = host.process(tup)
                else:
                    emits = host.process_keyed(tup, scoped)
                for emit in emits:
                    emitted.append(
                        (
                            name,
                            emit.stream,
                            EMIT,
                            encode_value(emit.values),
                            None,
                            None,
                            f"{seq}.{len(emitted):06d}",
                        )
                    )
        except ComponentError:
            raise
        except Exception as exc:
            index, batch = spark_task()
            if self.on_error != "dead-letter":
                msg = (
                    f"bolt {name!r} failed on tuple {values!r} from {source!r}/"
                    f"{stream!r} ({where}partition {index}, batch {batch}): "
                    f"{type(exc).__name__}: {exc}; fix process() and restart the "
                    f"query from the same checkpoint, or set {ON_ERROR_KEY}="
                    "dead-letter to divert failing tuples to dead rows"
                )
                raise ComponentError(msg) from exc
            report = {
                "source": source,
                "stream": stream,
                "error": f"{type(exc).__name__}: {exc}",
                "batch": batch,
                "partition": index,
            }
            dead = (name, stream, DEAD, encoded, key, encode_value(report), seq)
            return [dead], True
        if name in self.routing.sinks:
            return emitted, False
        keeps = self.routing.keeps
        return [r for r in emitted if keeps(name, r[1])], False


class BoltStage(BoltStageBase):
    """A stateless bolt (a :class:`Stage`)."""

    def rows(self, batches: Iterator[list[Row]]) -> Iterator[list[Row]]:
        """Run the bolt on the emits it subscribes to; pass the rest on."""
        keeps = self.routing.keeps
        inputs = self.inputs
        own: list[BoltHost] = []
        every: list[BoltHost] = []
        for batch in batches:
            out: list[Row] = []
            for row in batch:
                component, stream, kind = row[0], row[1], row[2]
                if kind != EMIT:
                    out.append(row)
                    continue
                if keeps(component, stream):
                    out.append(row)
                grouping = inputs.get((component, stream))
                if grouping is None:
                    continue
                # the partition (so the task index) is fixed for the whole call
                if grouping == _ALL:
                    every = every or [self.host(i) for i in range(self.tasks)]
                    hosts = every
                else:
                    own = own or [self.host()]
                    hosts = own
                emitted, _failed = self.process(hosts, row, key=None, where="")
                out.extend(emitted)
            yield out


class FusedStages:
    """One ``mapInArrow`` function running several stages one after another.

    Consecutive stateless bolts, and the keying of the stateful bolt after them,
    run in one Python pass per partition: rows go from stage to stage as lists of
    tuples, converted from and to Arrow once, without a round trip through the
    JVM in between. ``schema`` is the Arrow schema of the last stage's rows.
    """

    def __init__(self, stages: Sequence[Stage], schema: pa.Schema) -> None:
        self.stages = list(stages)
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run every stage over the partition's record batches, in order."""
        rows: Iterator[list[Row]] = (rows_of(batch) for batch in batches)
        for stage in self.stages:
            rows = stage.rows(rows)
        for out in rows:
            if out:
                yield record_batch(out, self.schema)


def _packed(groups: Mapping[bytes, list[Row]]) -> list[Row]:
    """Return ``(gkey, pack(rows))`` rows, at most ``_PACK_ROWS`` rows a pack."""
    out: list[Row] = []
    for gkey, rows in groups.items():
        for first in range(0, len(rows), _PACK_ROWS):
            out.append((gkey, pack(rows[first : first + _PACK_ROWS])))
    return out


class KeyStage:
    """Groups the rows before a stateful bolt by key (a :class:`Stage`)."""

    def __init__(self, ref: ComponentRef, routing: Routing) -> None:
        self.component = ref.component
        self.routing = routing
        topology = loaded_topology(ref.topology_path)
        #: (source, stream) -> (field indexes of the key, the stream's width
        #: when the key is all of its fields in order, else -1)
        fields: dict[tuple[str, str], tuple[tuple[int, ...], int]] = {}
        for sub in topology.components[ref.component].inputs:
            names = topology.components[sub.source].outputs[sub.stream].fields
            indexes = tuple(names.index(f) for f in sub.grouping.fields)
            whole = indexes == tuple(range(len(names)))
            fields[(sub.source, sub.stream)] = (indexes, len(names) if whole else -1)
        self.fields = fields

    def rows(self, batches: Iterator[list[Row]]) -> Iterator[list[Row]]:
        """Key the bolt's input and restore rows; pseudo-key what passes through.

        Yields :data:`KEYED_SCHEMA` rows: ``(gkey, pack(rows of that key))``.
        """
        spread = 0
        fields = self.fields
        keeps = self.routing.keeps
        for batch in batches:
            groups: dict[bytes, list[Row]] = {}
            for row in batch:
                component, stream, kind = row[0], row[1], row[2]
                subscribed = fields.get((component, stream))
                passes = kind != EMIT or keeps(component, stream)
                if kind == EMIT and subscribed is not None:
                    encoded = row[3]
                    decoded = decode_value(encoded)
                    indexes, width = subscribed
                    if len(decoded) == width:
                        # the key is every value in order: encode_key of the
                        # values is the same msgpack array as encode_value's
                        key = encoded
                    else:
                        key = encode_key(tuple(decoded[i] for i in indexes))
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = []
                    # the stateful stage takes the key from gkey, not the row
                    group.append(row)
                elif kind == RESTORE and component == self.component:
                    groups.setdefault(row[4], []).append(row)
                    passes = False
                if passes:
                    spread = (spread + 1) % _PSEUDO_SPREAD
                    groups.setdefault(_PSEUDO_KEYS[spread], []).append(row)
            yield _packed(groups)
