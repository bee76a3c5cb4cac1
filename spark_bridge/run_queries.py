"""The queries of one Spark run: the first, then one per rebalance (a restart).

:class:`RunQueries` starts a run's Structured Streaming query into its sink
and, for ``sr3 rebalance`` (:mod:`spark_bridge.rebalancing`), stops it between
two committed micro-batches and starts another from the ring's committed epoch
at the new task counts. :func:`wait_run` waits for what ends a query: idleness,
a deadline, a batch count, or an accepted rebalance.
:func:`spark_bridge.runner.run_topology` drives them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from backend.access import RingAccess
from spark_bridge.compiler import Plan, build_frame, plan_topology
from spark_bridge.errors import SparkBridgeError
from spark_bridge.kafka_sink import SparkKafkaSink, deliver_pending
from spark_bridge.kafka_start import kafka_starts
from spark_bridge.query_start import SPARK_DIR, QueryStart, plan_start
from spark_bridge.rebalancing import SparkRebalance, SparkRebalancing
from spark_bridge.ring import BatchCommit
from spark_bridge.sink import BatchSink
from topology_api.topology import load_topology

__all__ = ["START_RETRIES", "RunQueries", "set_partitions", "wait_run"]

logger = logging.getLogger(__name__)

#: How many times a query that failed transiently at its start is started again.
START_RETRIES: Final = 3
#: Spark's errors for a Python worker that did not connect back in time.
_TRANSIENT_START: Final = (
    "Python worker failed to connect back",
    "waiting for the Python worker to connect back",
)


def _transient(line: str) -> bool:
    return any(marker in line for marker in _TRANSIENT_START)


def set_partitions(session: SparkSession, plan: Plan) -> None:
    """Give a session this run started one shuffle partition per task."""
    topology = plan.topology
    tasks = [topology.components[s].tasks for s in plan.stateful] or [2]
    session.conf.set("spark.sql.shuffle.partitions", str(max(tasks)))


@dataclass
class RunQueries:
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
    #: the sink's committed batch count when the running query started
    committed_at_launch: int = 0
    #: the queries started again after a transient start failure (the report's)
    start_retries: list[str] = field(default_factory=list)

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
        self.committed_at_launch = sink.committed
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
                # what the state store loaded (the report's state_store)
                "stateOperators": list(p["stateOperators"] or ()),
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
            set_partitions(self.session, self.plan)
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

    def retry_start(self, exc: BaseException) -> bool:
        """Start the query again if it failed transiently before its first batch.

        Spark gives the Python worker behind a Python data source ten seconds
        to connect back (hard-coded in ``PythonWorkerFactory``); on a loaded
        machine its interpreter can take longer to start, and the query fails
        before it read anything. Nothing was committed by then, so the same
        start is launched again, at most :data:`START_RETRIES` times. Any other
        failure, or one after a committed batch, is the run's.

        Returns:
            Whether the query was started again.
        """
        reason = next(
            (line.strip() for line in str(exc).splitlines() if _transient(line)), None
        )
        if reason is None or self.sink.committed > self.committed_at_launch:
            return False
        if len(self.start_retries) >= START_RETRIES:
            return False
        self.start_retries.append(reason)
        logger.warning(
            "the Spark query failed before its first batch (%s); starting it "
            "again (%d of %d)",
            reason,
            len(self.start_retries),
            START_RETRIES,
        )
        self.query = self.launch(self.start_root)
        return True

    def start_root_count(self) -> int:
        """How many queries this run started after the first."""
        return sum(1 for p in self.root.glob("rebalance-*") if p.is_dir()) + 1


def wait_run(
    run: RunQueries,
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
