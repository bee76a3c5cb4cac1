"""The Python functions Spark runs for stateless bolts, fused with the keying.

Each stage is a picklable object holding plain data (a :class:`ComponentRef`,
the bolt's subscriptions and a :class:`Routing`); a Spark task loads the
topology and hosts the bolt's task instances it needs (see below). Every
stage reads :data:`spark_bridge.rows.ROW_SCHEMA` rows (as lists of tuples, one
list per Arrow record batch) and passes on the rows it does not consume: every
non-emit row, and the emit rows :class:`Routing` keeps.

- :class:`BoltStage`: a stateless bolt over the emits it subscribes to, in
  arrival order, as the task Storm's grouping picks: fields grouping
  ``floorMod(deepHashCode(key), par)``, global grouping task 0, ALL one hosted
  bolt per task index, a shuffle the task its emitter's shuffle picked when
  the emitter asked for task ids (the emit row's route, see
  :mod:`spark_bridge.routes`), else the partition's task. A bolt Storm ticks
  (``topology.tick.tuple.freq.secs`` set, a ``BatchingBolt`` or a
  ``process_tick``) gets its tick after the partition's last row, since a
  hosted bolt does not outlive its Spark task.
- :class:`spark_bridge.keying.KeyStage`: packs the rows before a stateful bolt
  per group key (re-exported here with its schema names).
- :class:`FusedStages` (``mapInArrow``): consecutive stages in one Python pass,
  converting Arrow to tuples once on the way in and once on the way out.

The stateful stage itself is :mod:`spark_bridge.keyed`; :class:`Routing` lives
in :mod:`spark_bridge.rows` and is re-exported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

import pandas as pd
import pyarrow as pa

from spark_bridge.context import storm_conf
from spark_bridge.errors import ComponentError
from spark_bridge.hosting import BoltHost, Emit, Flushed
from spark_bridge.keying import (
    GROUP_COLUMN,
    KEYED_ARROW_SCHEMA,
    KEYED_SCHEMA,
    ROWS_COLUMN,
    KeyStage,
    is_pseudo_key,
    pack,
    unpack,
)
from spark_bridge.routes import routed_task
from spark_bridge.rows import (
    COLUMNS,
    DEAD,
    EMIT,
    ComponentRef,
    Routing,
    Row,
    record_batch,
    rows_of,
)
from spark_bridge.worker import spark_task, topology_of
from sr3.codec import decode_value, encode_value
from sr3.config import KEYS, read_setting
from sr3.key_state import KeyState
from topology_api.java_hash import IntegerBoxing, key_task_index
from topology_api.topology import LoadedTopology

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
ON_ERROR_POLICIES: Final[tuple[str, ...]] = KEYS[ON_ERROR_KEY].choices
_ALL: Final = "ALL"
_FIELDS: Final = "FIELDS"
#: Seq prefix of emits at the end of a partition: sorts after every tuple's seq.
_FLUSH_SEQ: Final = "~"


def error_policy(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> str:
    """Return the ``sr3.on.error`` policy of ``component`` (default ``"fail"``).

    Raises:
        ConfigError: the merged conf holds another value (checked by the
            key's row of :data:`sr3.config.KEYS`).
    """
    conf = storm_conf(topology, component, overrides)
    return str(read_setting(conf, ON_ERROR_KEY, where=f"component {component!r}:"))


def frame_of(rows: Sequence[Row]) -> pd.DataFrame:
    """Return ``rows`` as a pandas frame of :data:`COLUMNS`."""
    return pd.DataFrame(list(rows), columns=list(COLUMNS))


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
        topology = topology_of(ref)
        info = topology.components[ref.component]
        self.inputs = {
            (sub.source, sub.stream): sub.grouping.kind.value for sub in info.inputs
        }
        #: (source, stream) -> indexes of the fields-grouping values (empty:
        #: global grouping) in that stream's tuples
        self.key_fields = {
            (sub.source, sub.stream): tuple(
                topology.components[sub.source].outputs[sub.stream].fields.index(f)
                for f in sub.grouping.fields
            )
            for sub in info.inputs
            if sub.grouping.kind.value == _FIELDS
        }
        self.tasks = info.tasks
        #: how Storm's router hashes int keys (``sr3.storm.json.integer.boxing``)
        self.boxing = IntegerBoxing.of({**topology.config, **ref.conf})
        self.on_error = on_error or error_policy(topology, ref.component, ref.conf)
        self._hosts: dict[int, BoltHost] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hosts": {}}

    def task_of(self, key: Sequence[Any], route: int | None = None) -> int:
        """Return the task index Storm's fields grouping picks for ``key``.

        ``key`` is the grouping values, or a stateful bolt's state key with its
        stored ``route`` (:func:`topology_api.java_hash.key_task_index`). An
        empty key (a global grouping) is the lowest task, as in Storm.
        """
        return key_task_index(key, route, self.tasks, self.boxing)

    def host(self, index: int | None = None) -> BoltHost:
        """Return the hosted task ``index`` (default: partition id modulo tasks)."""
        if index is None:
            index = spark_task()[0] % self.tasks
        host = self._hosts.get(index)
        if host is None:
            topology = topology_of(self.ref)
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
                tup = host.make_tuple(source, stream, values, row[4])
                if scoped is None:
                    emits = host.process(tup)
                else:
                    emits = host.process_keyed(tup, scoped)
                emitted.extend(self._emit_rows(host, emits, seq, len(emitted)))
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
        return self._kept(emitted), False

    def _emit_rows(
        self, host: BoltHost, emits: Sequence[Emit], s: str, first: int
    ) -> list[Row]:
        name, task = self.ref.component, host.task_key
        encode = encode_value
        return [
            (name, e.stream, EMIT, encode(e.values), task, e.route, f"{s}.{j:06d}")
            for j, e in enumerate(emits, start=first)
        ]

    def _kept(self, emitted: list[Row]) -> list[Row]:
        name = self.ref.component
        if name in self.routing.sinks:
            return emitted
        keeps = self.routing.keeps
        return [r for r in emitted if keeps(name, r[1])]

    def flush(self) -> list[Row]:
        """Tick every hosted bolt that emits on ticks; return the kept emits.

        Emit seqs start with ``~`` so they follow every tuple of the batch.
        Under dead-letter, the tuples of a batch whose call raised become dead
        rows and the other batches still run.

        Raises:
            ComponentError: the bolt raised under the fail policy.
        """
        out: list[Row] = []
        for index, host in sorted(self._hosts.items()):
            if not host.ticked:
                continue
            seq = f"{_FLUSH_SEQ}{index:04d}"
            for flushed in host.flush():
                if flushed.error is None:
                    out.extend(self._kept(self._emit_rows(host, flushed.emits, seq, 0)))
                else:
                    out.extend(self._flush_failed(host, seq, flushed))
        return out

    def _flush_failed(self, host: BoltHost, seq: str, flushed: Flushed) -> list[Row]:
        name = self.ref.component
        index, batch = spark_task()
        exc = flushed.error
        error = f"{type(exc).__name__}: {exc}"
        if self.on_error != "dead-letter":
            msg = (
                f"bolt {name!r} task {host.index} failed on its tick at the end of "
                f"partition {index}, batch {batch}: {error}; fix process_tick() or "
                f"process_batch() and restart the query from the same checkpoint, "
                f"or set {ON_ERROR_KEY}=dead-letter"
            )
            raise ComponentError(msg) from exc
        report = {"error": error, "batch": batch, "partition": index}
        return [
            (
                name,
                tup.stream,
                DEAD,
                encode_value(list(tup.values)),
                None,
                encode_value({"source": tup.component, "stream": tup.stream, **report}),
                seq,
            )
            for tup in flushed.held
        ]


class BoltStage(BoltStageBase):
    """A stateless bolt (a :class:`Stage`)."""

    def rows(self, batches: Iterator[list[Row]]) -> Iterator[list[Row]]:
        """Run the bolt on the emits it subscribes to; pass the rest on."""
        keeps = self.routing.keeps
        inputs = self.inputs
        key_fields = self.key_fields
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
                elif grouping == _FIELDS:
                    indexes = key_fields[(component, stream)]
                    values = decode_value(row[3]) if indexes else ()
                    key = [values[i] for i in indexes]
                    hosts = [self.host(self.task_of(key))]
                else:
                    # a shuffle the emitter asked task ids of picked the task
                    routed = routed_task(row[5], self.ref.component)
                    if routed is not None:
                        hosts = [self.host(routed)]
                    else:
                        own = own or [self.host()]
                        hosts = own
                emitted, _failed = self.process(hosts, row, key=None, where="")
                out.extend(emitted)
            yield out
        flushed = self.flush()
        if flushed:
            yield flushed


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
