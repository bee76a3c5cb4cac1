"""Run a streamparse Topology file and its bolt classes on Spark Structured Streaming.

The same topology file and the same ``ReplayableSpout`` / ``Bolt`` /
``StatefulBolt`` classes that run on Storm become ONE streaming query
(:mod:`spark_bridge.compiler` documents how each DAG shape maps):

- a ``ReplayableSpout`` becomes the Python streaming data source ``sr3_spout``
  (:mod:`spark_bridge.source`): Spark's offsets are the spout's offsets, one
  input partition per spout task, micro-batches bounded by ``maxRowsPerBatch``;
- each bolt is a stage of one row stream (:mod:`spark_bridge.rows`) that
  consumes the emits it subscribes to and passes the rest on, so branches and
  joins never duplicate a sub-plan; stateless bolts run per partition
  (``mapInArrow``), and the keying before a stateful bolt packs each key's rows;
- a ``StatefulBolt`` runs as ``groupBy(key).applyInPandasWithState`` on the
  values of its fields grouping, or, when a topology has several stateful bolts,
  as chained ``transformWithStateInPandas`` operators (:mod:`spark_bridge.keyed`):
  ``process`` runs per tuple in causal order with ``self.state`` scoped to the
  key;
- the sink (``foreachBatch``) writes each micro-batch to parquet and, with a
  ring, writes its changed keys to the SR3 ring and commits the batch as an SR3
  epoch (:mod:`spark_bridge.ring`); a query on an empty checkpoint restores its
  state from the ring through star, line or tree recovery, including state a
  Storm-engine run committed.

Entry points: ``sr3 run FILE --engine spark`` and ``python -m spark_bridge`` /
``spark-submit spark_bridge/__main__.py FILE``. :mod:`spark_bridge.standalone`
starts a standalone master and worker from the pip package for tests and labs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spark_bridge.errors import (
    ComponentError,
    QueryFailedError,
    ReplayError,
    SparkBridgeError,
    UnsupportedTopologyError,
)
from sr3.exports import lazy_exports

if TYPE_CHECKING:
    from spark_bridge.compiler import Plan, build_frame, plan_topology
    from spark_bridge.runner import final_state, run_topology, spark_session

__all__ = [
    "ComponentError",
    "Plan",
    "QueryFailedError",
    "ReplayError",
    "SparkBridgeError",
    "UnsupportedTopologyError",
    "build_frame",
    "final_state",
    "plan_topology",
    "run_topology",
    "spark_session",
]

# The driver API is imported on first use: Spark's Python processes that only
# unpickle a stage or the spout source (one per query for the source) then skip
# importing the compiler, the runner and their dependencies.
_LAZY: Final = {
    "Plan": "spark_bridge.compiler",
    "build_frame": "spark_bridge.compiler",
    "plan_topology": "spark_bridge.compiler",
    "final_state": "spark_bridge.runner",
    "run_topology": "spark_bridge.runner",
    "spark_session": "spark_bridge.runner",
}


__getattr__ = lazy_exports(__name__, _LAZY)
