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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from backend.access import RingAccess
from backend.committer import StartPoint
from spark_bridge.compiler import Plan, build_frame, plan_topology
from spark_bridge.errors import QueryFailedError, SparkBridgeError
from spark_bridge.kafka_jars import spark_kafka_jars
from spark_bridge.kafka_sink import SparkKafkaSink, deliver_pending
from spark_bridge.kafka_start import kafka_starts
from spark_bridge.metrics import SparkMetricsFeed
from spark_bridge.query_start import SPARK_DIR, QueryStart, plan_start
from spark_bridge.rebalancing import SparkRebalance, SparkRebalancing, components_of
from spark_bridge.ring import BatchCommit
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
        _set_partitions(session, plan)
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
    run = _Run(
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
    try:
        while True:
            idle = _wait(
                run,
                until_idle=until_idle,
                deadline=deadline,
                stop_after_batches=stop_after_batches,
                rebalancing=rebalancing,
            )
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
        raise QueryFailedError(msg) from exc
    finally:
        run.note_resumed()
        run.keep_progress()
        metrics.close()
        run.stop_query()
        if rebalancing is not None:
            rebalancing.close()
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
    return report


def _set_partitions(session: SparkSession, plan: Plan) -> None:
    """Give a session this run started one shuffle partition per task."""
    topology = plan.topology
    tasks = [topology.components[s].tasks for s in plan.stateful] or [2]
    session.conf.set("spark.sql.shuffle.partitions", str(max(tasks)))


@dataclass
class _Run:
    """The queries of one run: the first, then one per rebalance (a restart).

    Every query writes to the same sink (numbering its batches after the
    ones before) and commits to the same ring; each has its own Spark
    checkpoint (``<checkpoint_dir>/spark``, then
    ``<checkpoint_dir>/rebalance-<n>/spark``): Spark fixes a checkpoint's
    state partitions.
    """

    path: str | Path
    environment: str | None
    session: SparkSession
    own_session: bool
    overrides: dict[str, Any]
    ring: RingAccess | None
    root: Path
    max_rows_per_batch: int
    sink: BatchSink
    plan: Plan
    start: QueryStart
    query: Any = None
    start_root: Path = Path()
    parallelism: dict[str, int] = field(default_factory=dict)
    #: earlier queries' progress (batch ids numbered as the sink's) and commits
    progress: list[dict[str, Any]] = field(default_factory=list)
    commits: list[BatchCommit] = field(default_factory=list)
    #: the rebalance whose new query has not committed a batch yet, and the
    #: sink's batch count and restore infos when it started
    resuming: tuple[SparkRebalance, int, int] | None = None
    #: the first query's restore infos (the report's recoveries)
    infos_kept: int | None = None
    #: whether the query was stopped (a restart that failed may leave it so)
    stopped: bool = False

    def launch(self, start_root: Path) -> StreamingQuery:
        """Start the query of :attr:`plan` from :attr:`start` into the sink."""
        self.start_root = start_root
        plan, start, sink = self.plan, self.start, self.sink
        topology = plan.topology
        record = start.record
        kafka = kafka_starts(
            topology,
            plan.spouts,
            self.overrides,
            dict(record.offsets) if record is not None else start.start_offsets,
        )
        if self.ring is not None and record is not None and plan.kafka_sinks:
            deliver_pending(
                topology,
                plan.kafka_sinks,
                self.overrides,
                ring=self.ring,
                record=record,
            )
        frame = build_frame(
            self.session,
            plan,
            conf=self.overrides,
            max_rows_per_batch=self.max_rows_per_batch,
            start_offsets=start.start_offsets,
            extra=start.extra,
            kafka=kafka,
        )
        sink.committer = start.committer
        sink.kafka_spouts = frozenset(kafka)
        sink.positions = {
            k: v for s in kafka.values() for k, v in s.positions().items()
        }
        sink.kafka_sinks = [
            SparkKafkaSink.of(topology, name, self.overrides, run=str(start.query))
            for name in plan.kafka_sinks
        ]
        sink.last_epoch = record.epoch if record is not None else None
        self.stopped = False
        return (
            frame.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(start_root / SPARK_DIR))
            .outputMode(plan.output_mode)
            .queryName(f"sr3_{topology.name}_{int(time.time() * 1000)}")
            .start()
        )

    def recent_progress(self) -> list[Any]:
        """The running query's progress (the metrics feed's)."""
        return list(self.query.recentProgress)

    def recent_commits(self) -> list[BatchCommit]:
        """Every commit of the run so far (the metrics feed's)."""
        committer = self.start.committer
        return [*self.commits, *([] if committer is None else committer.commits)]

    def keep_progress(self) -> None:
        """Keep the running query's progress, its batch ids as the sink numbers them."""
        if self.stopped:
            return
        offset = self.sink.batch_offset
        self.progress.extend(
            {
                "batchId": int(p["batchId"]) + offset,
                "numInputRows": int(p["numInputRows"]),
                "durationMs": dict(p["durationMs"]),
            }
            for p in self.query.recentProgress
        )

    def stop_query(self) -> None:
        """Stop the running query; close its committer and Kafka sinks (once)."""
        if self.stopped:
            return
        self.stopped = True
        self.query.stop()
        if self.start.committer is not None:
            self.start.committer.close()
            self.commits.extend(self.start.committer.commits)
        for kafka_sink in self.sink.kafka_sinks:
            kafka_sink.close()

    def note_resumed(self) -> bool:
        """Mark the restart done once the new query committed; return whether so."""
        if self.resuming is None:
            return False
        rebalance, committed, infos = self.resuming
        if self.sink.committed <= committed:
            return False
        rebalance.bytes_moved = sum(
            int(i.get("bytes", 0)) for i in self.sink.infos[infos:]
        )
        rebalance.ended_at = time.monotonic()
        self.resuming = None
        logger.info(
            "rebalance %s done: every key paused %.3f s",
            rebalance.rebalance_id,
            rebalance.ended_at - (rebalance.stopped_at or rebalance.ended_at),
        )
        return True

    def restart(self, rebalance: SparkRebalance) -> None:
        """Carry out ``rebalance`` by a controlled restart of the query.

        The query stops between two committed micro-batches; a new one starts
        from the ring's committed epoch at the new task counts.

        Raises:
            SparkBridgeError: the run has no ring.
        """
        if self.ring is None:
            msg = "a Spark run rebalances only with a ring (sr3.zk.hosts)"
            raise SparkBridgeError(msg)
        sink = self.sink
        sink.pause()
        rebalance.stopped_at = time.monotonic()
        sink.wait_idle()  # the micro-batch under way commits its epoch
        self.keep_progress()
        self.stop_query()
        if self.infos_kept is None:
            self.infos_kept = len(sink.infos)
        self.parallelism.update({c: b for c, (_a, b) in rebalance.targets.items()})
        topology = load_topology(
            self.path, environment=self.environment, parallelism=self.parallelism
        )
        self.plan = plan_topology(
            topology, environment=self.environment, parallelism=self.parallelism
        )
        if self.own_session:
            _set_partitions(self.session, self.plan)
        start_root = self.root / f"rebalance-{self.start_root_count()}"
        self.start = plan_start(
            self.session,
            topology,
            self.plan,
            self.overrides,
            start_root,
            self.ring,
            resume=True,
        )
        record = self.start.record
        rebalance.epoch = record.epoch if record is not None else None
        sink.resume(sink.next_batch_number())
        self.resuming = (rebalance, sink.committed, len(sink.infos))
        self.query = self.launch(start_root)
        rebalance.switched_at = time.monotonic()
        logger.info(
            "rebalance %s: query restarted from epoch %s at %s",
            rebalance.rebalance_id,
            rebalance.epoch,
            self.parallelism,
        )

    def start_root_count(self) -> int:
        """How many queries this run started after the first."""
        return sum(1 for p in self.root.glob("rebalance-*") if p.is_dir()) + 1


def _wait(
    run: _Run,
    *,
    until_idle: bool,
    deadline: float | None,
    stop_after_batches: int | None,
    rebalancing: SparkRebalancing | None,
) -> bool | None:
    """Wait for idleness, the deadline, the batch count or a rebalance.

    Returns:
        Whether the query was idle when the run ends; None when an accepted
        rebalance is to be carried out (the run goes on).

    Raises:
        StreamingQueryException: the query failed.
    """
    query, sink = run.query, run.sink
    if (
        rebalancing is None
        and until_idle
        and deadline is None
        and stop_after_batches is None
    ):
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
        if run.note_resumed() and rebalancing is not None:
            rebalancing.changed()
        # before idleness: a run never ends idle with a rebalance accepted
        if rebalancing is not None and rebalancing.pending():
            return None
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
