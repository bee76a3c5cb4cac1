"""Compile a loaded streamparse topology into one streaming DataFrame.

This cut compiles linear topologies: one replayable spout, then a chain of
bolts each subscribing to the previous component only, with at most one
stateful bolt (Spark's Update mode allows one ``applyInPandasWithState`` per
query). Anything else raises :class:`UnsupportedTopologyError` naming the
component and the shape, before Spark starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.state import GroupStateTimeout

from spark_bridge.errors import UnsupportedTopologyError
from spark_bridge.rows import ROW_SCHEMA, STATE_SCHEMA, ComponentRef
from spark_bridge.source import MAX_ROWS_OPTION, SOURCE_NAME, SpoutSource
from spark_bridge.stages import BoltStage, KeyStage, StatefulStage
from storm_bridge.topology import LoadedTopology

__all__ = ["Plan", "build_frame", "plan_topology"]

#: Groupings a stateless bolt accepts: on Spark it runs where its input is.
_PARTITION_LOCAL: Final = frozenset({"SHUFFLE", "LOCAL_OR_SHUFFLE", "NONE", "FIELDS"})


@dataclass(frozen=True)
class Plan:
    """The linear chain a topology compiles to.

    Attributes:
        topology: The loaded topology.
        spout: The spout's component id.
        bolts: Bolt ids, in data-flow order.
        stateful: The stateful bolt's id, if any.
    """

    topology: LoadedTopology
    spout: str
    bolts: tuple[str, ...]
    stateful: str | None


def _unsupported(topology: LoadedTopology, component: str, why: str) -> Exception:
    msg = (
        f"topology {topology.name!r}: component {component!r} {why}; this cut of "
        "spark_bridge runs linear topologies (one spout, then one bolt after "
        "another, at most one stateful bolt): run it on the Storm engine for now"
    )
    return UnsupportedTopologyError(msg)


def plan_topology(topology: LoadedTopology) -> Plan:
    """Order the components of a linear topology.

    Raises:
        UnsupportedTopologyError: several spouts, a non-replayable spout, a
            branch, a join, an ALL/direct/custom grouping, a stateful bolt
            without a fields grouping, or two stateful bolts.
    """
    spouts = topology.spouts
    if len(spouts) != 1:
        names = [s.name for s in spouts]
        raise _unsupported(topology, ",".join(names), "is one of several spouts")
    spout = spouts[0]
    if not getattr(spout.component_cls, "sr3_replayable", False):
        raise _unsupported(
            topology, spout.name, "is not a ReplayableSpout (Spark needs offsets)"
        )
    chain: list[str] = []
    stateful: str | None = None
    current = spout.name
    while True:
        downstream = [
            b for b in topology.bolts if any(i.source == current for i in b.inputs)
        ]
        if not downstream:
            break
        if len(downstream) > 1:
            raise _unsupported(topology, current, "feeds several bolts (a branch)")
        bolt = downstream[0]
        if any(i.source != current for i in bolt.inputs):
            raise _unsupported(topology, bolt.name, "subscribes to several components")
        for sub in bolt.inputs:
            kind = sub.grouping.kind.value
            if bolt.stateful and (kind != "FIELDS" or not sub.grouping.fields):
                raise _unsupported(
                    topology,
                    bolt.name,
                    f"is stateful but subscribes with a {kind} grouping "
                    "(use Grouping.fields(...))",
                )
            if kind not in _PARTITION_LOCAL:
                raise _unsupported(topology, bolt.name, f"uses a {kind} grouping")
        if bolt.stateful:
            if stateful is not None:
                raise _unsupported(topology, bolt.name, "is a second stateful bolt")
            stateful = bolt.name
        chain.append(bolt.name)
        current = bolt.name
    unreached = set(topology.components) - {spout.name, *chain}
    if unreached:
        raise _unsupported(topology, sorted(unreached)[0], "is not on the chain")
    return Plan(topology, spout.name, tuple(chain), stateful)


def build_frame(
    spark: SparkSession,
    plan: Plan,
    *,
    conf: Mapping[str, Any],
    max_rows_per_batch: int,
) -> DataFrame:
    """Return the streaming DataFrame of the compiled topology (not started).

    Registers the ``sr3_spout`` data source on ``spark``.
    """
    spark.dataSource.register(SpoutSource)
    path = str(plan.topology.path)
    spout = ComponentRef(path, plan.spout, dict(conf))
    frame = (
        spark.readStream.format(SOURCE_NAME)
        .options(**spout.to_options())
        .option(MAX_ROWS_OPTION, str(max_rows_per_batch))
        .load()
    )
    for name in plan.bolts:
        ref = ComponentRef(path, name, dict(conf))
        if name == plan.stateful:
            frame = (
                frame.mapInPandas(KeyStage(ref), ROW_SCHEMA)
                .groupBy("key")
                .applyInPandasWithState(
                    StatefulStage(ref),
                    ROW_SCHEMA,
                    STATE_SCHEMA,
                    "Update",
                    GroupStateTimeout.NoTimeout,
                )
            )
        else:
            frame = frame.mapInPandas(BoltStage(ref), ROW_SCHEMA)
    return frame
