"""The one row shape every stage of a compiled topology reads and writes.

Storm tuples are untyped lists, so the bridge carries them msgpack-encoded
(:func:`sr3.codec.encode_value`) in a binary column. Every stage passes through
the rows it does not consume. Kinds:

- ``emit``: ``component`` emitted ``values`` on ``stream``; ``key`` is the
  emitting task's Storm task id (msgpack), the ``task`` of the tuple its
  subscribers receive; ``seq`` orders the rows of one key in a batch;
  ``state`` is the emit's route (the tasks its shuffle groupings picked, see
  :mod:`spark_bridge.routes`) when the emitter asked for task ids, else null.
- ``state``: after a micro-batch, ``component``'s state of ``key`` is ``state``
  (msgpack of the fields; null when the key was deleted). Only keys whose
  state changed in the batch.
- ``restore``: state restored from the SR3 ring when the query started with an
  empty Spark checkpoint: the stateful ``component`` installs ``state`` for
  ``key`` before that batch's tuples (consumed there).
- ``offset``: spout ``component`` task ``stream`` (its index) reached offset
  ``values`` (msgpack) in this batch; passes through to the sink.
- ``dead``: a tuple a bolt raised on, under the dead-letter policy:
  ``component`` is the bolt, ``stream``/``values`` the input, ``key`` its state
  key (if any), ``state`` msgpack of ``{"source", "stream", "error", "batch",
  "partition"}``.
- ``info``: a report (``state``, msgpack) for the driver, e.g. a restore's.
- ``tick``: the end of a micro-batch for stateful ``component`` in one Spark
  partition (see :mod:`spark_bridge.ticks`); consumed by its stage.

``seq`` is a string that sorts rows in causal order: a spout's ``k``-th row of
a batch from task ``t`` is ``f"{k:09d}.{t:04d}"`` and the ``j``-th emit while a
bolt processes the row with seq ``s`` is ``f"{s}.{j:06d}"``.

Inside a Python stage rows are plain tuples in :data:`COLUMNS` order;
:func:`rows_of` and :func:`record_batch` convert whole Arrow record batches
column by column (what ``mapInArrow`` stages read and yield).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

__all__ = [
    "COLUMNS",
    "DEAD",
    "EMIT",
    "INFO",
    "OFFSET",
    "RESTORE",
    "ROW_ARROW_SCHEMA",
    "ROW_SCHEMA",
    "STATE",
    "STATE_SCHEMA",
    "TICK",
    "ComponentRef",
    "Routing",
    "Row",
    "record_batch",
    "rows_of",
    "storm_values",
]

Row = tuple[Any, ...]

#: Schema of every stage's output (Spark DDL).
ROW_SCHEMA: Final = (
    "component string, stream string, kind string, values binary, key binary, "
    "state binary, seq string"
)
#: Column names of :data:`ROW_SCHEMA`, in order.
COLUMNS: Final = ("component", "stream", "kind", "values", "key", "state", "seq")
#: :data:`ROW_SCHEMA` as an Arrow schema.
ROW_ARROW_SCHEMA: Final = pa.schema(
    [
        ("component", pa.string()),
        ("stream", pa.string()),
        ("kind", pa.string()),
        ("values", pa.binary()),
        ("key", pa.binary()),
        ("state", pa.binary()),
        ("seq", pa.string()),
    ]
)
#: Schema of a stateful bolt's GroupState: the key's fields, msgpack-encoded.
STATE_SCHEMA: Final = "state binary"
EMIT: Final = "emit"
STATE: Final = "state"
RESTORE: Final = "restore"
OFFSET: Final = "offset"
DEAD: Final = "dead"
INFO: Final = "info"
TICK: Final = "tick"


def _json_key(key: Any) -> Any:
    # what json.dumps makes of a dict key; other keys fail there and in msgpack
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    if isinstance(key, bytes):
        return key.decode("utf-8")
    return key


def _json_like(value: Any) -> Any:
    if isinstance(value, dict):
        return {_json_key(k): _json_like(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_like(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def storm_values(values: Sequence[Any]) -> list[Any]:
    """Return emitted ``values`` as Storm's JSON multilang hands them on.

    Dict keys become strings (``1`` -> ``"1"``, ``True`` -> ``"true"``,
    ``None`` -> ``"null"``), tuples lists and bytes strings (UTF-8), as
    pystorm's default JSON serializer (simplejson) makes them, so a bolt reads
    the same values on both engines.

    Raises:
        UnicodeDecodeError: a bytes value is not UTF-8 (simplejson fails
            there too, and pystorm then drops the emit).
    """
    if not any(isinstance(v, dict | list | tuple | bytes) for v in values):
        return list(values)
    return [_json_like(v) for v in values]


def rows_of(batch: pa.RecordBatch) -> list[Row]:
    """Return the rows of ``batch`` as tuples, in order."""
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


def record_batch(rows: Sequence[Row], schema: pa.Schema) -> pa.RecordBatch:
    """Return ``rows`` (tuples in ``schema``'s column order) as a record batch."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [
        pa.array(column, type=column_field.type)
        for column, column_field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class ComponentRef:
    """What a Spark task needs to rebuild a component: picklable plain data.

    User classes are never pickled: each Python worker imports the topology file
    itself, so the file must be readable at the same path on every worker.

    Attributes:
        topology_path: Absolute path of the topology file.
        component: Component id.
        conf: Storm conf overrides (``wordcount.lines`` and the like).
        environment: The environment picking per-environment parallelism
            (``par={"prod": 4}``) the topology is loaded with, everywhere.
        parallelism: ``(component, tasks)`` pairs replacing the file's task
            counts (a rebalanced run's), everywhere.
    """

    topology_path: str
    component: str
    conf: Mapping[str, Any] = field(default_factory=dict)
    environment: str | None = None
    parallelism: tuple[tuple[str, int], ...] = ()

    def to_options(self) -> dict[str, str]:
        """Return this reference as data source options."""
        return {
            "topology": self.topology_path,
            "component": self.component,
            "conf": json.dumps(dict(self.conf)),
            "environment": json.dumps(self.environment),
            "parallelism": json.dumps(dict(self.parallelism)),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ComponentRef:
        """Rebuild a reference from :meth:`to_options` output."""
        return cls(
            topology_path=str(Path(options["topology"])),
            component=options["component"],
            conf=json.loads(options.get("conf") or "{}"),
            environment=json.loads(options.get("environment") or "null"),
            parallelism=tuple(
                sorted(json.loads(options.get("parallelism") or "{}").items())
            ),
        )


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
