"""Run a topology file as a Structured Streaming query and read its final state.

The query's sink is ``foreachBatch``: each micro-batch's rows (the last
component's emits and the stateful bolt's changed keys) are written as parquet
to ``<checkpoint_dir>/sink/batch_id=<n>``, overwriting on a re-run of the same
batch, so the sink is idempotent. :func:`final_state` folds the state rows,
newest batch last, into the format of ``sr3 state dump --json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pyarrow.parquet as pq
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from spark_bridge.compiler import build_frame, plan_topology
from spark_bridge.errors import QueryFailedError, SparkBridgeError
from spark_bridge.rows import EMIT, STATE
from sr3.codec import decode_key, decode_value
from storm_bridge.topology import load_topology

__all__ = ["final_state", "run_topology", "spark_session"]

_SINK_DIR: Final = "sink"
_SPARK_DIR: Final = "spark"
_BATCH_PREFIX: Final = "batch_id="
_REPO_ROOT: Final = str(Path(__file__).resolve().parent.parent)


def spark_session(master: str | None = "local[2]", *, app_name: str) -> SparkSession:
    """Return a Spark session whose Python workers can import the bridge.

    Sets ``PYSPARK_PYTHON`` (unless set) to this interpreter and puts the
    repository root on ``PYTHONPATH`` before the JVM starts; both only matter
    when this call starts Spark. ``master=None`` keeps spark-submit's master.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, *paths])
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    return (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


class _BatchSink:
    """``foreachBatch`` function writing each micro-batch as parquet."""

    def __init__(self, sink_dir: Path) -> None:
        self.sink_dir = sink_dir

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        target = self.sink_dir / f"{_BATCH_PREFIX}{batch_id}"
        frame.write.mode("overwrite").parquet(str(target))


def _batches(sink_dir: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    found: list[tuple[int, list[dict[str, Any]]]] = []
    if not sink_dir.is_dir():
        return found
    for child in sink_dir.iterdir():
        if not child.name.startswith(_BATCH_PREFIX):
            continue
        rows: list[dict[str, Any]] = []
        for part in sorted(child.glob("*.parquet")):
            rows.extend(pq.read_table(part).to_pylist())
        found.append((int(child.name.removeprefix(_BATCH_PREFIX)), rows))
    return sorted(found, key=lambda item: item[0])


def final_state(
    checkpoint_dir: str | Path, component: str | None = None
) -> dict[str, dict[str, Any]]:
    """Return a stateful bolt's committed state, as ``sr3 state dump --json`` does.

    Args:
        checkpoint_dir: The ``checkpoint_dir`` the topology ran with.
        component: The stateful bolt (default: the only one with state rows).

    Returns:
        ``{json.dumps(list(key)): fields}``, sorted by key; deleted keys absent.

    Raises:
        SparkBridgeError: ``component`` is None and several bolts wrote state.
    """
    latest: dict[bytes, Any] = {}
    seen: set[str] = set()
    for _batch, rows in _batches(Path(checkpoint_dir) / _SINK_DIR):
        for row in rows:
            if row["kind"] != STATE:
                continue
            seen.add(row["component"])
            if component is None or row["component"] == component:
                latest[row["key"]] = row["state"]
    if component is None and len(seen) > 1:
        msg = (
            f"{checkpoint_dir} holds the state of {sorted(seen)}; "
            "pass component= to choose one"
        )
        raise SparkBridgeError(msg)
    state = {
        json.dumps(list(decode_key(key))): decode_value(blob)
        for key, blob in latest.items()
        if blob is not None
    }
    return dict(sorted(state.items()))


def run_topology(  # noqa: PLR0913 (keyword-only run options)
    path: str | Path,
    *,
    checkpoint_dir: str | Path,
    master: str | None = "local[2]",
    until_idle: bool = True,
    conf: Mapping[str, Any] | None = None,
    max_rows_per_batch: int = 1000,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Run a topology file on Spark Structured Streaming.

    Args:
        path: The streamparse topology file.
        checkpoint_dir: Holds Spark's checkpoint (``spark/``) and the sink
            (``sink/``); rerunning with the same directory resumes the query.
        master: Spark master for a session this call starts (None: keep
            spark-submit's); ignored when ``spark`` is given.
        until_idle: Stop once every spout has nothing more to emit; otherwise
            run until the query is stopped.
        conf: Storm conf overrides given to every component.
        max_rows_per_batch: Spout tuples per micro-batch, all tasks together.
        spark: A session to use instead of starting one (its
            ``spark.sql.shuffle.partitions`` is left as it is; a started one
            gets the stateful bolt's task count).

    Returns:
        A report: topology, batches, input rows, emits of the last component,
        state keys, directories, elapsed seconds.

    Raises:
        TopologyError: the file cannot be loaded.
        UnsupportedTopologyError: the topology is not linear.
        QueryFailedError: the query stopped with an error (its message names the
            component, key and batch of a failing bolt).
    """
    started = time.monotonic()
    topology = load_topology(path)
    plan = plan_topology(topology)
    session = spark
    if session is None:
        session = spark_session(master, app_name=f"sr3-{topology.name}")
        # A stateful bolt's tasks become its state partitions (fixed at first run).
        tasks = topology.components[plan.stateful].tasks if plan.stateful else 1
        session.conf.set("spark.sql.shuffle.partitions", str(tasks))
    root = Path(checkpoint_dir).resolve()
    sink_dir = root / _SINK_DIR
    frame = build_frame(
        session, plan, conf=dict(conf or {}), max_rows_per_batch=max_rows_per_batch
    )
    query = (
        frame.writeStream.foreachBatch(_BatchSink(sink_dir))
        .option("checkpointLocation", str(root / _SPARK_DIR))
        .outputMode("update")
        .queryName(f"sr3_{topology.name}_{int(time.time() * 1000)}")
        .start()
    )
    try:
        if until_idle:
            query.processAllAvailable()
        else:
            query.awaitTermination()
    except StreamingQueryException as exc:
        msg = (
            f"topology {topology.name!r} failed on Spark: {exc}; the Spark "
            f"checkpoint in {root / _SPARK_DIR} lets a fixed run resume"
        )
        raise QueryFailedError(msg) from exc
    finally:
        progress = list(query.recentProgress)
        query.stop()
    last = plan.bolts[-1] if plan.bolts else plan.spout
    emitted = sum(
        1
        for _batch, rows in _batches(sink_dir)
        for row in rows
        if row["kind"] == EMIT and row["component"] == last
    )
    state = final_state(root, plan.stateful) if plan.stateful else {}
    return {
        "topology": topology.name,
        "engine": "spark",
        "master": session.sparkContext.master,
        "components": [plan.spout, *plan.bolts],
        "stateful": plan.stateful,
        "batches": sum(1 for p in progress if p["numInputRows"] > 0),
        "input_rows": sum(int(p["numInputRows"]) for p in progress),
        "emitted": {last: emitted},
        "state_keys": len(state),
        "checkpoint_dir": str(root),
        "elapsed_s": round(time.monotonic() - started, 3),
    }
