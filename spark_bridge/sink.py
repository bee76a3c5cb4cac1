"""The query's sink and what is read back from it: final state and the run report.

:class:`BatchSink` is the ``foreachBatch`` function: each micro-batch's rows
are written as parquet to ``<checkpoint_dir>/sink/batch_id=<n>`` (overwritten
when Spark runs the batch again), then, with a ring, its changed keys are
committed as an SR3 epoch (:class:`spark_bridge.ring.BatchCommitter`), then
the outputs of ``KafkaSink`` components go to Kafka
(:mod:`spark_bridge.kafka_sink`).
:func:`final_state` folds the sink's state rows, newest batch last, into the
format of ``sr3 state dump --json``; :func:`build_report` builds ``sr3 run
--json`` in the Storm engine's shape.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from backend.access import RingAccess
from spark_bridge.compiler import Plan
from spark_bridge.errors import BatchLimitError, QueryPausedError, SparkBridgeError
from spark_bridge.kafka_sink import SparkKafkaSink, crash_point
from spark_bridge.ring import ENGINE, BatchCommit, BatchCommitter
from spark_bridge.rows import DEAD, EMIT, INFO, OFFSET, STATE
from spark_bridge.state_loads import state_store_loads
from sr3.codec import decode_key, decode_value
from sr3.key_state import ROUTE_FIELD
from topology_api.outputs import LastOutputs, sink_components
from topology_api.topology import LoadedTopology

__all__ = [
    "SINK_DIR",
    "BatchSink",
    "build_report",
    "final_state",
    "read_batch",
    "sink_batches",
]

#: The sink's directory under a run's checkpoint directory.
SINK_DIR: Final = "sink"
_BATCH_PREFIX: Final = "batch_id="
_MAX_DEAD: Final = 20


@dataclass
class BatchSink:
    """``foreachBatch`` function: parquet sink, then the ring commit."""

    sink_dir: Path
    committer: BatchCommitter | None
    spouts: frozenset[str]
    #: batch id -> seconds of the ring writes and commit
    sr3_seconds: dict[int, float] = field(default_factory=dict)
    #: batch id -> wall seconds of the whole foreachBatch call
    sink_seconds: dict[int, float] = field(default_factory=dict)
    infos: list[dict[str, Any]] = field(default_factory=list)
    #: micro-batches committed by this run
    committed: int = 0
    #: spouts whose offset rows are per Kafka partition (merged into the task's)
    kafka_spouts: frozenset[str] = frozenset()
    #: ``{"spout/index": {"topic:partition": next offset}}`` of those spouts
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    #: ``KafkaSink`` components: each committed batch's outputs go to Kafka
    kafka_sinks: Sequence[SparkKafkaSink] = ()
    #: the epoch the last committed batch was committed as (a re-run's)
    last_epoch: int | None = None
    #: micro-batches this run commits at most (``--max-batches``; None: no limit)
    limit: int | None = None
    #: added to Spark's batch id in the sink's directory names: a query started
    #: by a rebalance counts its batches from 0 again
    batch_offset: int = 0
    _gate: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _paused: bool = False
    _in_flight: bool = False

    def pause(self) -> None:
        """Take no more micro-batches (the one under way still commits)."""
        with self._gate:
            self._paused = True

    def resume(self, batch_offset: int) -> None:
        """Take micro-batches again, of a new query numbered from ``batch_offset``."""
        with self._gate:
            self._paused = False
            self.batch_offset = batch_offset

    def wait_idle(self) -> None:
        """Wait until no micro-batch is being written or committed (after pause)."""
        with self._gate:
            self._gate.wait_for(lambda: not self._in_flight)

    def next_batch_number(self) -> int:
        """The sink's lowest batch number above every batch it holds."""
        held = [batch for batch, _path in _batch_dirs(self.sink_dir)]
        return max(held, default=-1) + 1

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` as parquet, then commit it to the ring.

        Raises:
            BatchLimitError: the run committed its ``limit`` already; the
                query stops without this batch (Spark may start the next one
                before the run's stop reaches it).
            QueryPausedError: the run paused the query (a rebalance); the
                batch is not run, the next query reads it again.
        """
        if self.limit is not None and self.committed >= self.limit:
            msg = (
                f"micro-batch {batch_id} not run: this run stops after "
                f"{self.limit} committed micro-batches (--max-batches)"
            )
            raise BatchLimitError(msg)
        with self._gate:
            if self._paused:
                msg = f"micro-batch {batch_id} not run: the query is being restarted"
                raise QueryPausedError(msg)
            self._in_flight = True
        try:
            self._write(frame, batch_id)
        finally:
            with self._gate:
                self._in_flight = False
                self._gate.notify_all()

    def _write(self, frame: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        number = batch_id + self.batch_offset
        target = self.sink_dir / f"{_BATCH_PREFIX}{number}"
        frame.write.mode("overwrite").parquet(str(target))
        changes: dict[str, dict[bytes, bytes | None]] = {}
        offsets: dict[str, Any] = {}
        # only state, offset and info rows matter here: emits are most rows
        for row in read_batch(target, emits=False):
            kind = row["kind"]
            if kind == STATE:
                blob = row["state"]
                changes.setdefault(row["component"], {})[row["key"]] = blob
            elif kind == OFFSET and row["component"] in self.kafka_spouts:
                task = f"{row['component']}/{row['stream']}"
                merged = self.positions.setdefault(task, {})
                merged.update(decode_value(row["values"]))
                offsets[task] = dict(sorted(merged.items()))
            elif kind == OFFSET and row["component"] in self.spouts:
                offsets[f"{row['component']}/{row['stream']}"] = decode_value(
                    row["values"]
                )
            elif kind == INFO and row["state"] is not None:
                self.infos.append(dict(decode_value(row["state"])))
        epoch = batch_id + 1  # without a ring: Spark's batch is the epoch
        outputs = [k.outputs(target, batch_id) for k in self.kafka_sinks]
        if self.committer is not None:
            # the outputs go into the epoch too: a driver that dies before
            # their Kafka transaction leaves them for the next start
            pending = {
                k.owner: k.pending(out)
                for k, out in zip(self.kafka_sinks, outputs, strict=True)
            }
            report = self.committer.commit(batch_id, changes, offsets, pending)
            self.sr3_seconds[number] = report.seconds
            if report.epoch is not None:
                self.last_epoch = report.epoch
            epoch = self.last_epoch if self.last_epoch is not None else epoch
        crash_point(batch_id)
        for kafka_sink, out in zip(self.kafka_sinks, outputs, strict=True):
            kafka_sink.deliver(batch_id, epoch, target, out)
        self.sink_seconds[number] = time.perf_counter() - started
        self.committed += 1


def read_batch(directory: Path, *, emits: bool = True) -> list[dict[str, Any]]:
    """Return the rows of one batch directory (without emit rows unless ``emits``)."""
    rows: list[dict[str, Any]] = []
    for part in sorted(directory.glob("*.parquet")):
        table = pq.read_table(part)
        if not emits:
            table = table.filter(pc.field("kind") != EMIT)
        rows.extend(table.to_pylist())
    return rows


def _batch_dirs(sink_dir: Path) -> list[tuple[int, Path]]:
    """Return ``(batch number, directory)`` of every batch in ``sink_dir``, sorted."""
    if not sink_dir.is_dir():
        return []
    return sorted(
        (int(child.name.removeprefix(_BATCH_PREFIX)), child)
        for child in sink_dir.iterdir()
        if child.name.startswith(_BATCH_PREFIX)
    )


def sink_batches(sink_dir: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """Return ``(batch number, rows)`` of every batch in ``sink_dir``, oldest first.

    A batch's number is Spark's batch id, plus the batches of the queries
    before it in the same run (a rebalance starts a new query).
    """
    return [(batch, read_batch(path)) for batch, path in _batch_dirs(sink_dir)]


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    """Return a stored entry's fields, without the key's route (as a dump shows)."""
    if ROUTE_FIELD in entry:
        return {k: v for k, v in entry.items() if k != ROUTE_FIELD}
    return entry


def final_state(
    checkpoint_dir: str | Path, component: str | None = None
) -> dict[str, dict[str, Any]]:
    """Return a stateful bolt's state as the sink recorded it, as ``sr3 state dump``.

    Only keys changed by this checkpoint's batches are in the sink: a query
    that restored state from the ring has the rest in the ring
    (``sr3 state dump``).

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
    for _batch, rows in sink_batches(Path(checkpoint_dir) / SINK_DIR):
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
        json.dumps(list(decode_key(key))): _fields(decode_value(blob))
        for key, blob in latest.items()
        if blob is not None
    }
    return dict(sorted(state.items()))


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(ordered[-1], 1),
    }


def _counters(
    topology: LoadedTopology,
    batches: Sequence[tuple[int, list[dict[str, Any]]]],
    emitted: Mapping[str, int],
) -> dict[str, dict[str, int | None]]:
    """Return the Storm engine's per-component counters, as far as Spark knows.

    Spouts' tuples are counted by their offset rows and sinks' emits by the
    sink; a stateless bolt's other counts are not collected (None), acks and
    fails do not exist on Spark (None), Spark restarts no task (0), and errors
    are the component's dead letters.
    """
    spouts = dict.fromkeys((s.name for s in topology.spouts), 0)
    errors: dict[str, int] = {}
    for _batch, rows in batches:
        for row in rows:
            kind, name = row["kind"], row["component"]
            if kind == OFFSET and name in spouts and row["state"] is not None:
                spouts[name] += int(decode_value(row["state"]))
            elif kind == DEAD:
                errors[name] = errors.get(name, 0) + 1
    counters: dict[str, dict[str, int | None]] = {}
    for name in topology.components:
        spout = spouts.get(name)
        own = spout if spout is not None else emitted.get(name)
        counters[name] = {
            "spout_emitted": spout or 0,
            "bolt_acked": 0 if spout is not None else None,
            "emitted": own,
            "acked": None,
            "failed": None,
            "restarts": 0,
            "errors": errors.get(name, 0),
        }
    return counters


def build_report(  # noqa: PLR0913 (everything the report shows)
    *,
    topology: LoadedTopology,
    plan: Plan,
    session: SparkSession,
    sink: BatchSink,
    started_from: str,
    commits: Sequence[BatchCommit],
    ring: RingAccess | None,
    progress: Sequence[Any],
    overrides: Mapping[str, Any],
    root: Path,
    seconds: float,
    session_s: float,
    idle: bool,
) -> dict[str, Any]:
    """Return the report of ``sr3 run --json``, in the Storm engine's shape."""
    batches = sink_batches(root / SINK_DIR)
    sinks = sink_components(topology)
    # keyed as the Storm engine keys them: topology config, then -o overrides
    outputs = LastOutputs(topology, {**topology.config, **overrides})
    emitted: dict[str, int] = dict.fromkeys(sinks, 0)
    dead: list[dict[str, Any]] = []
    dead_count = 0
    for _batch, rows in batches:
        ordered = sorted(
            (r for r in rows if r["kind"] in (EMIT, DEAD)), key=lambda r: r["seq"] or ""
        )
        for row in ordered:
            if row["kind"] == DEAD:
                dead_count += 1
                if len(dead) < _MAX_DEAD:
                    info = dict(decode_value(row["state"])) if row["state"] else {}
                    dead.append(
                        {
                            "component": row["component"],
                            "values": decode_value(row["values"]),
                            **info,
                        }
                    )
            else:
                if row["component"] in emitted:
                    emitted[row["component"]] += 1
                # any output stream, a non-sink's unsubscribed one included
                outputs.add(
                    row["component"], row["stream"], decode_value(row["values"])
                )
    active = [p for p in progress if int(p["numInputRows"]) > 0]
    ran = {int(p["batchId"]) for p in progress}
    # offset, restore and info rows are input rows to Spark, not spout tuples
    offset_rows = sum(
        1
        for batch, rows in batches
        if batch in ran
        for row in rows
        # a Kafka spout's offset rows are made after Spark's Kafka source
        if row["kind"] == OFFSET and row["component"] not in sink.kafka_spouts
    )
    input_rows = sum(int(p["numInputRows"]) for p in progress) - offset_rows
    latencies = [float(p["durationMs"].get("triggerExecution", 0)) for p in active]
    sr3_total = sum(sink.sr3_seconds.values())
    batch_total = sum(latencies) / 1000.0
    written = [c for c in commits if c.epoch is not None]
    durations = [c.seconds for c in written]
    state: dict[str, Any] = {}
    if ring is not None:
        state = ring.state_summary(topology.name, plan.stateful)
    else:
        for name in plan.stateful:
            state[name] = {"epoch": None, "keys": len(final_state(root, name))}
    recoveries = []
    if sink.infos:
        restores = {str(i["restore"]): i for i in sink.infos}
        used = sorted({str(i.get("used")) for i in sink.infos})
        mechanisms = sorted({str(i.get("mechanism")) for i in sink.infos})
        restore_s = max(float(i.get("seconds", 0.0)) for i in sink.infos)
        recoveries.append(
            {
                "cause": started_from,
                "component": ",".join(plan.stateful),
                "at_s": 0.0,
                "mechanism": ",".join(mechanisms),
                "used": ",".join(used),
                "timeline": {"detect_s": 0.0, "restore_s": restore_s, "replay_s": None},
                "restored_bytes": sum(int(i.get("bytes", 0)) for i in sink.infos),
                "restored_keys": sum(int(i.get("keys", 0)) for i in sink.infos),
                "restores": restores,
            }
        )
    spout_rows = input_rows - sum(1 + int(i.get("keys", 0)) for i in sink.infos)
    running = seconds - session_s
    return {
        "topology": topology.name,
        "engine": ENGINE,
        "master": session.sparkContext.master,
        "seconds": round(seconds, 3),
        # a Spark application starts its session once: rates leave it out
        "session_start_s": round(session_s, 3),
        "idle": idle,
        "started_from": started_from,
        "throughput": {
            "tuples_per_s": round(spout_rows / running, 1) if running > 0 else 0.0,
            "spout_tuples_per_s": round(spout_rows / running, 1)
            if running > 0
            else 0.0,
            "spout_tuples": spout_rows,
            "bolt_tuples": None,
        },
        "components": [*plan.spouts, *plan.bolts, *plan.kafka_sinks],
        "stateful": list(plan.stateful),
        "input_rows": spout_rows,
        "emitted": dict(sorted(emitted.items())),
        "state_keys": sum(int(v.get("keys", 0)) for v in state.values()),
        "batches": len(active),
        "micro_batches": {
            "count": len(active),
            "latency_ms": _percentiles(latencies),
            "sr3_seconds": round(sr3_total, 4),
            "sr3_share": round(sr3_total / batch_total, 4) if batch_total else None,
        },
        "checkpoints": {
            "count": len(written),
            "last_committed_epoch": written[-1].epoch if written else None,
            "mean_duration_s": round(statistics.fmean(durations), 4)
            if durations
            else None,
            "max_duration_s": round(max(durations), 4) if durations else None,
            "compactions": sum(len(c.compacted) for c in written),
            "bytes": sum(c.bytes_written for c in written),
        },
        "recoveries": recoveries,
        # a lost executor's partitions reload from Spark's checkpoint, not the ring
        "state_store": state_store_loads(progress),
        "state": state,
        "outputs": outputs.to_dict(),
        "counters": _counters(topology, batches, emitted),
        "dead_letters": {"count": dead_count, "first": dead},
        "errors": [],
        "error_count": 0,
        "checkpoint_dir": str(root),
    }
