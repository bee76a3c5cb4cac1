"""Run a streamparse Topology file and its bolt classes on Spark Structured Streaming.

The same topology file and the same ``ReplayableSpout`` / ``Bolt`` /
``StatefulBolt`` classes that run on Storm become ONE streaming query:

- a ``ReplayableSpout`` becomes the Python streaming data source ``sr3_spout``
  (:mod:`spark_bridge.source`): Spark's offsets are the spout's offsets, one
  input partition per spout task, micro-batches bounded by ``maxRowsPerBatch``;
- a stateless bolt runs per partition with ``mapInPandas``
  (:class:`spark_bridge.stages.BoltStage`), emits captured into rows;
- a ``StatefulBolt`` runs as ``groupBy(key).applyInPandasWithState`` on the
  values of its fields grouping (:class:`spark_bridge.stages.StatefulStage`):
  ``process`` runs per tuple with ``self.state`` scoped to the group key, the
  key's fields kept msgpack-encoded in the GroupState;
- the sink writes each micro-batch to parquet; :func:`final_state` returns the
  committed state in the format of ``sr3 state dump --json``.

Tuples travel msgpack-encoded in one generic row shape (:mod:`spark_bridge.rows`).
Groupings: a stateful bolt needs ``Grouping.fields(...)`` (that is the Spark
shuffle); a stateless bolt runs where its input partition is, so SHUFFLE,
LOCAL_OR_SHUFFLE, NONE and FIELDS all compile to "no shuffle" (a stateless bolt
keeping its own in-memory maps per field value would differ from Storm).

What runs in this cut: linear topologies only, i.e. one replayable spout, then
bolts each subscribing to the previous component, at most one stateful bolt
(``topologies/wordcount.py`` is one). Everything else is rejected before Spark
starts with :class:`UnsupportedTopologyError`. How the rest will map (NOT
implemented yet):

- branches (one component feeding several bolts): the frame of the shared
  component is reused by each branch, tagged by subscriber, and the branches'
  outputs are ``union``-ed into the one sink; Spark plans the shared prefix once
  per branch, so stateful prefixes must be split at a stateful bolt;
- joins (a bolt subscribing to several components or several spouts): the input
  frames are ``union``-ed (same row shape) before the bolt, then keyed and
  grouped as usual, so a stateful join sees all its inputs under one key;
- ALL grouping: a broadcast of the stream to every partition; direct and custom
  groupings: no Spark equivalent planned;
- several stateful bolts: Spark allows one ``applyInPandasWithState`` per query
  in Update mode, so they need Append mode with watermarks or chained queries.

SR3 as recovery core (ring writes per micro-batch, restoring from the ring when
the Spark checkpoint is missing, Storm-to-Spark hand-off) is not in this cut:
recovery today is Spark's own checkpoint.
"""

from spark_bridge.compiler import Plan, build_frame, plan_topology
from spark_bridge.errors import (
    ComponentError,
    QueryFailedError,
    ReplayError,
    SparkBridgeError,
    UnsupportedTopologyError,
)
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
