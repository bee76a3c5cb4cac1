"""Compile a loaded streamparse topology (any DAG) into one streaming DataFrame.

How each DAG shape maps onto Spark. The whole topology is ONE row stream of
:data:`spark_bridge.rows.ROW_SCHEMA` rows, so no sub-plan is ever used twice
(a reused sub-plan would run its stateful operators twice):

- **spouts**: each ``ReplayableSpout`` is an ``sr3_spout`` streaming source
  (:mod:`spark_bridge.source`), a ``KafkaSpout`` Spark's own Kafka source
  (:mod:`spark_bridge.kafka_source`); the spout frames and any ``extra`` frames (e.g.
  restore rows) are ``union``-ed. A plain ``Spout`` is rejected: Spark replays
  micro-batches from offsets.
- **bolts**, in a topological order (definition order among ready bolts): each
  is one stage that consumes the emit rows it subscribes to, appends its own
  emits, and passes on every other row that is still needed: emits a later
  stage subscribes to or of a sink component (one nothing subscribes to), and
  every state, offset, dead and info row, and restore rows of other bolts.
  Emits nobody later needs are dropped there.
- **branch** (one component feeding several bolts): its emits pass through the
  first subscriber's stage and are consumed again by the later ones.
- **join** (a bolt subscribing to several components or spouts): the inputs are
  already in the one stream; a stateful join groups them all by key.
- **stateless bolt**: ``mapInArrow`` (:class:`spark_bridge.stages.BoltStage`),
  where the partition is (no shuffle). The hosted instance is the task Storm
  would pick for FIELDS (``floorMod(deepHashCode)``) and global (task 0)
  groupings, the partition's for SHUFFLE, LOCAL_OR_SHUFFLE and NONE; ALL runs
  the tuple through one bolt instance per task index; a shuffle whose emitter
  asked for task ids runs on the task it returned. Bolts Storm ticks
  (``topology.tick.tuple.freq.secs``) get one tick at the end of each
  partition of a micro-batch.
  DIRECT and CUSTOM groupings are rejected, and so is a
  ``TicklessBatchingBolt`` (its timer thread emits at any moment).
- **stateful bolt** (FIELDS grouping on every input): a keying stage
  (:class:`spark_bridge.stages.KeyStage`, packing each key's rows of a record
  batch into one row) then ``groupBy("gkey")``. With
  one stateful bolt that is ``applyInPandasWithState`` in Update mode; with two
  or more each is ``transformWithStateInPandas`` in Append mode on the RocksDB
  state store (Spark allows one ``applyInPandasWithState`` per query), and
  :attr:`Plan.session_conf` says so. Pass-through rows get pseudo keys that
  never touch state (:mod:`spark_bridge.keyed`); a ticked stateful bolt gets
  a tick group last in every partition (:mod:`spark_bridge.ticks`).

- **KafkaSink**: not a stage: its inputs reach the sink as outputs, and the
  sink writes them to Kafka once their micro-batch committed
  (:mod:`spark_bridge.kafka_sink`, :attr:`Plan.kafka_sinks`).

Anything else raises :class:`UnsupportedTopologyError` naming the component, and
a bad ``sr3.on.error`` raises :class:`sr3.errors.ConfigError`, before Spark starts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.state import GroupStateTimeout
from pystorm.bolt import TicklessBatchingBolt

from spark_bridge.errors import UnsupportedTopologyError
from spark_bridge.kafka_sink import is_kafka_sink, overrides_record
from spark_bridge.kafka_source import kafka_frame
from spark_bridge.kafka_start import KafkaStart
from spark_bridge.keyed import KeyedProcessor, StatefulStage
from spark_bridge.rows import ROW_ARROW_SCHEMA, ROW_SCHEMA, STATE_SCHEMA, ComponentRef
from spark_bridge.source import (
    MAX_ROWS_OPTION,
    SOURCE_NAME,
    START_OFFSETS_OPTION,
    SpoutSource,
)
from spark_bridge.stages import (
    GROUP_COLUMN,
    KEYED_ARROW_SCHEMA,
    KEYED_SCHEMA,
    BoltStage,
    FusedStages,
    KeyStage,
    Routing,
    error_policy,
)
from spark_bridge.ticks import SHUFFLE_PARTITIONS_KEY
from topology_api.barriers import internal_stream
from topology_api.contract import is_replayable_class
from topology_api.topology import LoadedTopology

__all__ = ["Plan", "build_frame", "plan_topology"]

#: Groupings a stateless bolt accepts (ALL runs once per task index).
_STATELESS_GROUPINGS: Final = frozenset(
    {"SHUFFLE", "LOCAL_OR_SHUFFLE", "NONE", "FIELDS", "ALL"}
)
#: State store a query with several stateful bolts needs.
_ROCKSDB: Final = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}


@dataclass(frozen=True)
class Plan:
    """What a topology compiles to, and what the runner must do for it.

    Attributes:
        topology: The loaded topology.
        spouts: Spout ids, in definition order.
        bolts: Bolt ids, in a topological (data-flow) order.
        stateful: The stateful bolts, in data-flow order.
        sinks: Components nothing subscribes to: their emits reach the sink.
        outputs: ``(component, stream)`` pairs nothing subscribes to, of any
            component: their emits reach the sink too (the report's outputs).
        output_mode: The query's output mode (``"update"`` or ``"append"``).
        session_conf: Spark confs to set before the query starts.
        environment: The environment the topology was loaded with (its
            per-environment parallelism); every Spark task loads it so too.
        parallelism: ``(component, tasks)`` pairs the topology was loaded
            with (a rebalanced run's task counts); every Spark task too.
        kafka_sinks: ``KafkaSink`` components: not stages, the sink writes
            their inputs to Kafka (their inputs are in ``outputs``).
    """

    topology: LoadedTopology
    spouts: tuple[str, ...]
    bolts: tuple[str, ...]
    stateful: tuple[str, ...]
    sinks: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]
    output_mode: str
    session_conf: dict[str, str]
    environment: str | None = None
    kafka_sinks: tuple[str, ...] = ()
    parallelism: tuple[tuple[str, int], ...] = ()

    def routing(self, position: int) -> Routing:
        """Return what the stage of ``bolts[position]`` passes on."""
        components = self.topology.components
        later = frozenset(
            (sub.source, sub.stream)
            for name in self.bolts[position + 1 :]
            for sub in components[name].inputs
        )
        return Routing(later | frozenset(self.outputs), frozenset(self.sinks))


def _unsupported(topology: LoadedTopology, component: str, why: str) -> Exception:
    msg = (
        f"topology {topology.name!r}: component {component!r} {why}; run it on the "
        "Storm engine, or change the topology as suggested"
    )
    return UnsupportedTopologyError(msg)


def _check_inputs(topology: LoadedTopology, name: str) -> None:
    bolt = topology.components[name]
    if issubclass(bolt.component_cls, TicklessBatchingBolt):
        raise _unsupported(
            topology,
            name,
            "is a TicklessBatchingBolt, whose timer thread emits outside process() "
            "at any moment; subclass streamparse's BatchingBolt instead (on Spark "
            "its batches are processed at the end of every micro-batch)",
        )
    for sub in bolt.inputs:
        kind = sub.grouping.kind.value
        if bolt.stateful and (kind != "FIELDS" or not sub.grouping.fields):
            raise _unsupported(
                topology,
                name,
                f"is stateful but subscribes to {sub.source!r} with a {kind} "
                "grouping (use Grouping.fields(...))",
            )
        if kind not in _STATELESS_GROUPINGS:
            raise _unsupported(
                topology,
                name,
                f"subscribes to {sub.source!r} with a {kind} grouping, which has "
                "no Spark equivalent (use a shuffle or fields grouping)",
            )


def _topological(topology: LoadedTopology, bolts: Sequence[str]) -> list[str]:
    done = {s.name for s in topology.spouts}
    pending = list(bolts)
    order: list[str] = []
    while pending:
        ready = [
            b
            for b in pending
            if all(i.source in done for i in topology.components[b].inputs)
        ]
        if not ready:
            raise _unsupported(
                topology, pending[0], "is on a cycle (Spark needs an acyclic flow)"
            )
        order.append(ready[0])
        done.add(ready[0])
        pending.remove(ready[0])
    return order


def plan_topology(
    topology: LoadedTopology,
    *,
    environment: str | None = None,
    parallelism: Mapping[str, int] | None = None,
) -> Plan:
    """Order the components of a topology and choose the Spark forms.

    ``environment`` and ``parallelism`` are those ``topology`` was loaded with
    (``load_topology(path, environment=..., parallelism=...)``).

    Raises:
        UnsupportedTopologyError: no spout, a spout that is not a
            ``ReplayableSpout``, a DIRECT or CUSTOM grouping, a
            ``TicklessBatchingBolt``, a stateful bolt
            without a fields grouping on every input, or a cycle.
    """
    spouts = [s.name for s in topology.spouts]
    if not spouts:
        raise _unsupported(topology, topology.name, "has no spout")
    for spout in topology.spouts:
        if not is_replayable_class(spout.component_cls):
            raise _unsupported(
                topology,
                spout.name,
                "is a plain Spout; Spark needs offsets to replay micro-batches: "
                "subclass storm_bridge.ReplayableSpout",
            )
    kafka_sinks = tuple(
        b.name for b in topology.bolts if is_kafka_sink(b.component_cls)
    )
    for name in kafka_sinks:
        if overrides_record(topology.components[name].component_cls):
            raise _unsupported(
                topology,
                name,
                "is a KafkaSink overriding record(), which the Spark engine does "
                "not call (it writes each input as the JSON object of its fields); "
                "emit the record's fields from the bolt before the sink instead",
            )
    names = [b.name for b in topology.bolts if b.name not in kafka_sinks]
    for name in names:
        _check_inputs(topology, name)
    bolts = _topological(topology, names)
    stateful = tuple(b for b in bolts if topology.components[b].stateful)
    subscribed = {sub.source for b in bolts for sub in topology.components[b].inputs}
    sinks = tuple(
        c for c in topology.components if c not in subscribed and c not in kafka_sinks
    )
    streams = {
        (sub.source, sub.stream) for b in bolts for sub in topology.components[b].inputs
    }
    outputs = tuple(
        (name, stream)
        for name, comp in topology.components.items()
        for stream in comp.outputs
        if not internal_stream(stream) and (name, stream) not in streams
    )
    several = len(stateful) > 1
    return Plan(
        topology=topology,
        spouts=tuple(spouts),
        bolts=tuple(bolts),
        stateful=stateful,
        sinks=sinks,
        outputs=outputs,
        output_mode="append" if several else "update",
        session_conf=dict(_ROCKSDB) if several else {},
        environment=environment,
        kafka_sinks=kafka_sinks,
        parallelism=tuple(sorted((parallelism or {}).items())),
    )


def build_frame(  # noqa: PLR0913 (keyword-only build options)
    spark: SparkSession,
    plan: Plan,
    *,
    conf: Mapping[str, Any],
    max_rows_per_batch: int,
    start_offsets: Mapping[str, Any] | None = None,
    extra: Sequence[DataFrame] = (),
    kafka: Mapping[str, KafkaStart] | None = None,
) -> DataFrame:
    """Return the streaming DataFrame of the compiled topology (not started).

    Registers the ``sr3_spout`` data source on ``spark``.

    Args:
        spark: The session.
        plan: From :func:`plan_topology`.
        conf: Storm conf overrides given to every component.
        max_rows_per_batch: Spout tuples per micro-batch, per spout.
        start_offsets: ``{"spout/task index": offset}``: those tasks start
            after the offset (as SR3 commit records store spout offsets).
        extra: Streaming frames of ``ROW_SCHEMA`` rows (e.g. restore rows)
            union-ed with the spout frames before the first bolt.
        kafka: Where each ``KafkaSpout`` starts
            (:func:`spark_bridge.kafka_start.kafka_starts`); those spouts read
            through Spark's Kafka source.

    Raises:
        ConfigError: a bolt's ``sr3.on.error`` is not ``fail`` or ``dead-letter``.
        SparkBridgeError: a ``KafkaSpout`` but no Kafka source on the classpath.
    """
    path = str(plan.topology.path)
    environment, parallelism = plan.environment, plan.parallelism
    overrides = dict(conf)
    for name in plan.bolts:
        error_policy(plan.topology, name, overrides)
    spark.dataSource.register(SpoutSource)
    starts = json.dumps(dict(start_offsets or {}))
    kafka = kafka or {}
    frames = [
        kafka_frame(
            spark,
            ComponentRef(path, spout, overrides, environment, parallelism),
            kafka[spout],
            max_rows=max_rows_per_batch,
        )
        if spout in kafka
        else spark.readStream.format(SOURCE_NAME)
        .options(
            **ComponentRef(
                path, spout, overrides, environment, parallelism
            ).to_options()
        )
        .option(MAX_ROWS_OPTION, str(max_rows_per_batch))
        .option(START_OFFSETS_OPTION, starts)
        .load()
        for spout in plan.spouts
    ]
    frame = functools.reduce(DataFrame.union, [*frames, *extra])
    several = len(plan.stateful) > 1
    # consecutive stateless stages (and the keying of a stateful bolt after
    # them) run fused in one mapInArrow: no JVM round trip between them
    pending: list[Any] = []
    for position, name in enumerate(plan.bolts):
        ref = ComponentRef(path, name, overrides, environment, parallelism)
        routing = plan.routing(position)
        if name not in plan.stateful:
            pending.append(BoltStage(ref, routing))
            continue
        partitions = int(spark.conf.get(SHUFFLE_PARTITIONS_KEY) or 200)
        on_error = error_policy(plan.topology, name, overrides)
        pending.append(KeyStage(ref, routing, partitions=partitions, on_error=on_error))
        fused = FusedStages(pending, KEYED_ARROW_SCHEMA)
        grouped = frame.mapInArrow(fused, KEYED_SCHEMA).groupBy(GROUP_COLUMN)
        pending = []
        stage = StatefulStage(ref, routing)
        if several:
            frame = grouped.transformWithStateInPandas(
                KeyedProcessor(stage), ROW_SCHEMA, "Append", "None"
            )
        else:
            frame = grouped.applyInPandasWithState(
                stage, ROW_SCHEMA, STATE_SCHEMA, "Update", GroupStateTimeout.NoTimeout
            )
    if pending:
        frame = frame.mapInArrow(FusedStages(pending, ROW_ARROW_SCHEMA), ROW_SCHEMA)
    return frame
