"""Run a topology file as a Structured Streaming query, SR3 as its recovery core.

The query's sink is ``foreachBatch`` (:mod:`spark_bridge.sink`): each
micro-batch's rows (the outputs' emits, the stateful bolts' changed keys, spout
offsets, dead letters) are written as parquet to
``<checkpoint_dir>/sink/batch_id=<n>``, overwriting on a re-run of the same
batch, so the sink is idempotent. With a ring (:class:`backend.access.RingAccess`),
the batch's changed keys are then written to the ring and the batch committed
in ZooKeeper as an SR3 epoch (:mod:`spark_bridge.ring`) before Spark commits it.

Where a run starts (its Spark checkpoint, the ring's committed epoch, or
empty state) is decided in :mod:`spark_bridge.query_start`; the queries a run
starts (one more per ``sr3 rebalance``) are :mod:`spark_bridge.run_queries`'.

:func:`final_state` (from :mod:`spark_bridge.sink`, re-exported) folds the
sink's state rows, newest batch last, into the format of ``sr3 state dump
--json`` (a run without a ring has only those).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from backend.access import RingAccess
from backend.committer import StartPoint
from spark_bridge.compiler import plan_topology
from spark_bridge.errors import QueryFailedError
from spark_bridge.kafka_jars import spark_kafka_jars
from spark_bridge.metrics import SparkMetricsFeed
from spark_bridge.query_start import SPARK_DIR, plan_start
from spark_bridge.rebalancing import SparkRebalancing, components_of
from spark_bridge.run_queries import RunQueries, set_partitions, wait_run
from spark_bridge.run_report import build_report
from spark_bridge.sink import SINK_DIR, BatchSink, final_state
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
        set_partitions(session, plan)
    session_s = time.monotonic() - started
    for key, value in plan.session_conf.items():
        session.conf.set(key, value)
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", _PROGRESS_KEPT)
    root = Path(checkpoint_dir).resolve()
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
    sink = BatchSink(
        root / SINK_DIR,
        start.committer,
        frozenset(plan.spouts),
        limit=stop_after_batches,
    )
    run = RunQueries(
        path=path,
        environment=environment,
        session=session,
        own_session=spark is None,
        overrides=overrides,
        ring=ring,
        root=root,
        max_rows_per_batch=max_rows_per_batch,
        sink=sink,
        plan=plan,
        start=start,
    )
    run.query = run.launch(root)
    metrics = SparkMetricsFeed(
        topology.name,
        plan.spouts,
        (ring.config if ring is not None else Sr3Config()).metrics,
        metrics_targets,
    )
    metrics.start(run.recent_progress, run.recent_commits)
    rebalancing = None
    if ring is not None:
        rebalancing = SparkRebalancing(
            ring, topology.name, components_of(topology, plan.stateful, overrides)
        )
        rebalancing.start(started)
    deadline = None if duration_s is None else started + duration_s
    failure: str | None = None  # why the run failed, for a rebalance left unfinished
    try:
        while True:
            try:
                idle = wait_run(
                    run,
                    until_idle=until_idle,
                    deadline=deadline,
                    stop_after_batches=stop_after_batches,
                    rebalancing=rebalancing,
                )
            except StreamingQueryException as exc:
                if run.retry_start(exc):
                    continue
                raise
            taken = None if rebalancing is None else rebalancing.take()
            if idle is not None or taken is None or rebalancing is None:
                break
            run.restart(taken)
            rebalancing.switched(
                components_of(run.plan.topology, run.plan.stateful, overrides)
            )
    except StreamingQueryException as exc:
        msg = (
            f"topology {topology.name!r} failed on Spark: {_cause(exc)}{exc}; the "
            f"Spark checkpoint in {run.start_root / SPARK_DIR} lets a fixed run resume"
        )
        failure = msg
        raise QueryFailedError(msg) from exc
    except BaseException as exc:
        failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.note_resumed()
        run.keep_progress()
        metrics.close()
        run.stop_query()
        if rebalancing is not None:
            rebalancing.close(failure)
    if run.infos_kept is not None:  # the report's recoveries: the first start's
        del sink.infos[run.infos_kept :]
    seconds = time.monotonic() - started
    report = build_report(
        topology=run.plan.topology,
        plan=run.plan,
        session=session,
        sink=sink,
        started_from=start.how,
        commits=run.commits,
        ring=ring,
        progress=run.progress,
        overrides=overrides,
        root=root,
        seconds=seconds,
        session_s=session_s,
        idle=bool(idle),
    )
    if rebalancing is not None:
        report["rebalances"] = rebalancing.report()
    report["start_retries"] = list(run.start_retries)
    return report


def _cause(exc: Exception) -> str:
    """Return the first bridge error message in a Spark error, with a newline."""
    for line in str(exc).splitlines():
        name, _sep, text = line.partition(": ")
        if name.startswith("spark_bridge.errors.") and text:
            return f"{text}\n"
    return ""
