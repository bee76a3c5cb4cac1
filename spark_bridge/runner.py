"""Run a topology file as a Structured Streaming query, SR3 as its recovery core.

The query's sink is ``foreachBatch`` (:mod:`spark_bridge.sink`): each
micro-batch's rows (the outputs' emits, the stateful bolts' changed keys, spout
offsets, dead letters) are written as parquet to
``<checkpoint_dir>/sink/batch_id=<n>``, overwriting on a re-run of the same
batch, so the sink is idempotent. With a ring (:class:`backend.access.RingAccess`),
the batch's changed keys are then written to the ring and the batch committed
in ZooKeeper as an SR3 epoch (:mod:`spark_bridge.ring`) before Spark commits it.

Starting points, as ``sr3 run`` on the Storm engine:

- a Spark checkpoint with progress: Spark resumes from it (its state store);
  the ring must hold this query's own last commit, else the state moved on
  under another run and the checkpoint is refused;
- an empty checkpoint with ``resume``: state is restored from the ring's
  committed epoch through star, line or tree recovery and the spouts start at
  its offsets, whichever engine committed it (the engine hand-off);
- an empty checkpoint without ``resume``: empty state, an empty epoch is
  committed above every epoch published before.

:func:`final_state` (from :mod:`spark_bridge.sink`, re-exported) folds the
sink's state rows, newest batch last, into the format of ``sr3 state dump
--json`` (a run without a ring has only those).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from backend.access import RingAccess
from backend.chain import ChainPolicy
from backend.committer import EpochCommitter, StartPoint
from spark_bridge.compiler import Plan, build_frame, plan_topology
from spark_bridge.errors import QueryFailedError, SparkBridgeError
from spark_bridge.kafka_jars import spark_kafka_jars
from spark_bridge.kafka_sink import SparkKafkaSink, deliver_storm_pending
from spark_bridge.kafka_start import kafka_starts
from spark_bridge.metrics import SparkMetricsFeed
from spark_bridge.ring import (
    RESTORE_SOURCE,
    BatchCommitter,
    RestoreSource,
    restore_options,
    stateful_owners,
)
from spark_bridge.sink import SINK_DIR, BatchSink, build_report, final_state
from sr3.config import Sr3Config
from storm_bridge.groupings import IntegerBoxing
from storm_bridge.topology import LoadedTopology, load_topology
from zk.checkpoints import CommitRecord

__all__ = ["final_state", "run_topology", "spark_session"]

logger = logging.getLogger(__name__)

_SPARK_DIR: Final = "spark"
_QUERY_FILE: Final = "sr3-query.json"
_SECRET_FILE: Final = "sr3-secret"  # noqa: S105 (a file name)
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


def _has_progress(spark_dir: Path) -> bool:
    commits = spark_dir / "commits"
    return commits.is_dir() and any(
        p.name.isdigit() for p in commits.iterdir() if p.is_file()
    )


def _query_id(root: Path, *, progress: bool) -> str:
    path = root / _QUERY_FILE
    if progress and path.is_file():
        return str(json.loads(path.read_text(encoding="utf-8"))["query"])
    query = str(uuid.uuid4())
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"query": query}), encoding="utf-8")
    return query


def _secret_file(root: Path, ring: RingAccess) -> Path | None:
    secret = ring.config.node.secret
    if not secret:
        return None
    path = root / _SECRET_FILE
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(secret, encoding="utf-8")
    return path


@dataclass
class _Start:
    committer: BatchCommitter | None = None
    record: CommitRecord | None = None
    start_offsets: dict[str, Any] | None = None
    extra: list[DataFrame] = field(default_factory=list)
    how: str = "empty"
    query: str | None = None


def _start(  # noqa: PLR0913 (the start's inputs)
    session: SparkSession,
    topology: LoadedTopology,
    plan: Plan,
    conf: Mapping[str, Any],
    root: Path,
    ring: RingAccess | None,
    *,
    resume: bool,
    start_from: StartPoint | None = None,
) -> _Start:
    progress = _has_progress(root / _SPARK_DIR)
    if start_from is not None and (ring is None or progress):
        msg = (
            f"starting topology {topology.name!r} from {start_from} needs a ring "
            "and an empty Spark checkpoint; "
            + (
                "pass a ring (sr3.zk.hosts)"
                if ring is None
                else f"pass a fresh --checkpoint-dir (not {root})"
            )
        )
        raise SparkBridgeError(msg)
    if ring is None:
        return _Start(
            how="spark checkpoint" if progress else "empty",
            query=_query_id(root, progress=progress),
        )
    owners = stateful_owners(topology, plan.stateful, conf)
    settings = Sr3Config.merged(topology.config, conf)
    if start_from is not None:
        # checked before the query id is written: a refused start changes nothing
        EpochCommitter(ring, topology.name, background=False).start(
            start_from=start_from, components=plan.stateful
        )
    query = _query_id(root, progress=progress)
    if not progress and not resume and start_from is None:
        EpochCommitter(ring, topology.name, background=False).start()
    committer = BatchCommitter(
        access=ring,
        topology=topology,
        owners=owners,
        query_id=query,
        policy=ChainPolicy(settings.recovery.max_chain_length),
        boxing=IntegerBoxing.of({**topology.config, **conf}),
        retain=settings.checkpoint.retain,
    )
    record = committer.open()
    start = _Start(committer=committer, record=record, query=query)
    if progress:
        extra = dict(record.extra) if record is not None else {}
        if record is not None and record.epoch > 0 and extra.get("query") != query:
            engine = extra.get("engine", "storm")
            msg = (
                f"topology {topology.name!r}: the ring's committed epoch "
                f"{record.epoch} was written by another run ({engine} engine) "
                f"after this Spark checkpoint ({root / _SPARK_DIR}); resuming it "
                "would lose that state. Delete the checkpoint directory (or pass "
                "another one) to restore from the ring"
            )
            raise SparkBridgeError(msg)
        start.how = "spark checkpoint"
        return start
    if record is None or record.epoch == 0 or not record.owners:
        start.start_offsets = dict(record.offsets) if record is not None else None
        start.how = "empty"
        return start
    start.start_offsets = dict(record.offsets)
    session.dataSource.register(RestoreSource)
    ring_conf = {
        k: v for k, v in ring.config.to_mapping().items() if k != "sr3.node.secret"
    }
    options = restore_options(
        record=record,
        owners=owners,
        ring_conf=ring_conf,
        secret_file=_secret_file(root, ring),
    )
    start.extra.append(
        session.readStream.format(RESTORE_SOURCE).options(**options).load()
    )
    start.how = f"ring epoch {record.epoch}"
    return start


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
    start = _start(
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
        deliver_storm_pending(
            topology, plan.kafka_sinks, overrides, ring=ring, owners=record.owners
        )
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
    )
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / _SPARK_DIR))
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
            f"Spark checkpoint in {root / _SPARK_DIR} lets a fixed run resume"
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
