"""Run a topology file as a Structured Streaming query, SR3 as its recovery core.

The query's sink is ``foreachBatch`` (:mod:`spark_bridge.sink`): each
micro-batch's rows (the outputs' emits, the stateful bolts' changed keys, spout
offsets, dead letters) are written as parquet to
``<checkpoint_dir>/sink/batch_id=<n>``, overwriting on a re-run of the same
batch, so the sink is idempotent. With a ring (:class:`backend.access.RingAccess`),
the batch's changed keys are then written to the ring and the batch committed
in ZooKeeper as an SR3 epoch (:mod:`spark_bridge.ring`) before Spark commits it.

Where a run starts (its Spark checkpoint, the ring's committed epoch, or
empty state) is decided in :mod:`spark_bridge.query_start`.

:func:`final_state` (from :mod:`spark_bridge.sink`, re-exported) folds the
sink's state rows, newest batch last, into the format of ``sr3 state dump
--json`` (a run without a ring has only those).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from backend.access import RingAccess
from backend.committer import StartPoint
from spark_bridge.compiler import build_frame, plan_topology
from spark_bridge.errors import QueryFailedError
from spark_bridge.kafka_jars import spark_kafka_jars
from spark_bridge.kafka_sink import SparkKafkaSink, deliver_pending
from spark_bridge.kafka_start import kafka_starts
from spark_bridge.metrics import SparkMetricsFeed
from spark_bridge.query_start import SPARK_DIR, plan_start
from spark_bridge.sink import SINK_DIR, BatchSink, build_report, final_state
from sr3.config import Sr3Config
from topology_api.topology import load_topology

__all__ = ["final_state", "run_topology", "spark_session"]

logger = logging.getLogger(__name__)

_REPO_ROOT: Final = str(Path(__file__).resolve().parent.parent)
_PROGRESS_KEPT: Final = "100000"


def spark_session(master: str | None = "local[2]", *, app_name: str) -> SparkSession:
    """Return a Spark session whose Python workers can import the bridge.

    Sets ``PYSPARK_PYTHON`` (unless set) to this interpreter and puts the
    repository root on ``PYTHONPATH`` before the JVM starts; both only matter
    when this call starts Spark. ``master=None`` keeps spark-submit's master.
    Spark's Kafka source jars, when fetched, go on the classpath (``spark.jars``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, *paths])
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    jars = spark_kafka_jars(os.environ.get("SR3_CACHE_DIR"))
    if jars:  # Spark's Kafka source, for topologies with a KafkaSpout or KafkaSink
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    return (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )


def run_topology(  # noqa: PLR0913, PLR0915 (keyword-only run options)
    path: str | Path,
    *,
    checkpoint_dir: str | Path,
    master: str | None = "local[2]",
    until_idle: bool = True,
    duration_s: float | None = None,
    conf: Mapping[str, Any] | None = None,
    max_rows_per_batch: int = 1000,
    spark: SparkSession | None = None,
    ring: RingAccess | None = None,
    resume: bool = False,
    stop_after_batches: int | None = None,
    environment: str | None = None,
    start_from: StartPoint | None = None,
    metrics_targets: Path | None = None,
) -> dict[str, Any]:
    """Run a topology file on Spark Structured Streaming.

    Args:
        path: The streamparse topology file.
        checkpoint_dir: Holds Spark's checkpoint (``spark/``) and the sink
            (``sink/``); rerunning with the same directory resumes the query.
        master: Spark master for a session this call starts (None: keep
            spark-submit's); ignored when ``spark`` is given.
        until_idle: Stop once every spout has nothing more to emit and every
            batch is processed and committed.
        duration_s: Stop after this many seconds (with ``until_idle``: at the
            latest then).
        conf: Storm conf overrides given to every component.
        max_rows_per_batch: Spout tuples per micro-batch, all tasks together.
        spark: A session to use instead of starting one (its
            ``spark.sql.shuffle.partitions`` is left as it is; a started one
            gets the largest stateful bolt's task count).
        ring: SR3 ring handles: state is written per batch and restored from
            the ring (None: Spark's checkpoint is the only recovery).
        resume: With an empty Spark checkpoint, continue from the ring's
            committed epoch (state and spout offsets) instead of empty state.
        stop_after_batches: Stop once this many micro-batches were committed
            by this run (a partial run, as before a hand-off).
        environment: Picks each component's parallelism where the topology
            gives one per environment (``par={"prod": 4, "dev": 1}``), as
            ``sparse run -e`` does; the Spark tasks load the topology so too.
        start_from: With an empty Spark checkpoint, start from a savepoint or
            an earlier epoch of the ring (implies ``resume``).
        metrics_targets: A lab's Prometheus targets dir, where the run lists
            its metrics endpoint while it runs (None: not listed).

    Returns:
        The report of ``sr3 run --json``, in the Storm engine's shape.

    Raises:
        TopologyError: the file cannot be loaded.
        UnsupportedTopologyError: the topology cannot run on Spark.
        QueryFailedError: the query stopped with an error (its message names the
            component, key and batch of a failing bolt).
        SparkBridgeError: the Spark checkpoint and the ring disagree, or
            ``start_from`` comes with no ring or a used Spark checkpoint.
        ConfigError: ``start_from`` cannot be restored (nothing changed).
    """
    started = time.monotonic()
    topology = load_topology(path, environment=environment)
    overrides = dict(conf or {})
    plan = plan_topology(topology, environment=environment)
    session = spark
    if session is None:
        session = spark_session(master, app_name=f"sr3-{topology.name}")
        tasks = [topology.components[s].tasks for s in plan.stateful] or [2]
        session.conf.set("spark.sql.shuffle.partitions", str(max(tasks)))
    session_s = time.monotonic() - started
    for key, value in plan.session_conf.items():
        session.conf.set(key, value)
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", _PROGRESS_KEPT)
    root = Path(checkpoint_dir).resolve()
    sink_dir = root / SINK_DIR
    start = plan_start(
        session,
        topology,
        plan,
        overrides,
        root,
        ring,
        resume=resume,
        start_from=start_from,
    )
    record = start.record
    kafka = kafka_starts(
        topology,
        plan.spouts,
        overrides,
        dict(record.offsets) if record is not None else start.start_offsets,
    )
    if ring is not None and record is not None and plan.kafka_sinks:
        deliver_pending(topology, plan.kafka_sinks, overrides, ring=ring, record=record)
    frame = build_frame(
        session,
        plan,
        conf=overrides,
        max_rows_per_batch=max_rows_per_batch,
        start_offsets=start.start_offsets,
        extra=start.extra,
        kafka=kafka,
    )
    sink = BatchSink(
        sink_dir,
        start.committer,
        frozenset(plan.spouts),
        kafka_spouts=frozenset(kafka),
        positions={k: v for s in kafka.values() for k, v in s.positions().items()},
        kafka_sinks=[
            SparkKafkaSink.of(topology, name, overrides, run=str(start.query))
            for name in plan.kafka_sinks
        ],
        last_epoch=record.epoch if record is not None else None,
        limit=stop_after_batches,
    )
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / SPARK_DIR))
        .outputMode(plan.output_mode)
        .queryName(f"sr3_{topology.name}_{int(time.time() * 1000)}")
        .start()
    )
    metrics = SparkMetricsFeed(
        topology.name,
        plan.spouts,
        (ring.config if ring is not None else Sr3Config()).metrics,
        metrics_targets,
    )
    committer = start.committer
    metrics.start(
        lambda: list(query.recentProgress),
        lambda: [] if committer is None else list(committer.commits),
    )
    try:
        idle = _wait(
            query,
            sink,
            until_idle=until_idle,
            deadline=None if duration_s is None else started + duration_s,
            stop_after_batches=stop_after_batches,
        )
    except StreamingQueryException as exc:
        msg = (
            f"topology {topology.name!r} failed on Spark: {_cause(exc)}{exc}; the "
            f"Spark checkpoint in {root / SPARK_DIR} lets a fixed run resume"
        )
        raise QueryFailedError(msg) from exc
    finally:
        progress = list(query.recentProgress)
        metrics.close()
        query.stop()
        if start.committer is not None:
            start.committer.close()
        for kafka_sink in sink.kafka_sinks:
            kafka_sink.close()
    seconds = time.monotonic() - started
    return build_report(
        topology=topology,
        plan=plan,
        session=session,
        sink=sink,
        started_from=start.how,
        commits=[] if start.committer is None else start.committer.commits,
        ring=ring,
        progress=progress,
        overrides=overrides,
        root=root,
        seconds=seconds,
        session_s=session_s,
        idle=idle,
    )


def _wait(
    query: StreamingQuery,
    sink: BatchSink,
    *,
    until_idle: bool,
    deadline: float | None,
    stop_after_batches: int | None,
) -> bool:
    """Wait for idleness, the deadline or the batch count; return whether idle.

    Raises:
        StreamingQueryException: the query failed.
    """
    if until_idle and deadline is None and stop_after_batches is None:
        query.processAllAvailable()
        return True
    drained = threading.Event()
    failure: list[BaseException] = []

    def drain() -> None:
        try:
            query.processAllAvailable()
            drained.set()
        except Exception as exc:  # noqa: BLE001 (re-raised by the waiting thread)
            failure.append(exc)

    if until_idle:
        threading.Thread(target=drain, name="sr3-drain", daemon=True).start()
    while deadline is None or time.monotonic() < deadline:
        if drained.is_set():
            return True
        # before the query's state: the sink refuses a batch past the limit
        # (BatchLimitError), which ends the query once the limit is reached
        if stop_after_batches is not None and sink.committed >= stop_after_batches:
            return False
        if failure or not query.isActive:
            query.awaitTermination()  # raises the query's error, if any
            return False
        time.sleep(0.05)
    return False


def _cause(exc: Exception) -> str:
    """Return the first bridge error message in a Spark error, with a newline."""
    for line in str(exc).splitlines():
        name, _sep, text = line.partition(": ")
        if name.startswith("spark_bridge.errors.") and text:
            return f"{text}\n"
    return ""
