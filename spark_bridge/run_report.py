"""The report of ``sr3 run --json`` for a Spark run, in the Storm engine's shape.

:func:`build_report` reads the run's sink back (:mod:`spark_bridge.sink`) for
emits, dead letters and spout offsets, and combines them with what the
:class:`~spark_bridge.sink.BatchSink` measured and collected (ring seconds,
restore reports), Spark's progress of each micro-batch, the ring commits
(:class:`spark_bridge.ring.BatchCommit`) and the ring's state summary. Counts
Spark does not have (acks, fails, a stateless bolt's tuples) are None.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.compiler import Plan
from spark_bridge.ring import ENGINE, BatchCommit
from spark_bridge.rows import DEAD, EMIT, OFFSET
from spark_bridge.sink import SINK_DIR, BatchSink, final_state, sink_batches
from spark_bridge.state_loads import state_store_loads
from sr3.codec import decode_value
from sr3.latency import percentiles
from topology_api.outputs import LastOutputs, sink_components
from topology_api.topology import LoadedTopology

__all__ = ["build_report"]

_MAX_DEAD: Final = 20


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
            "latency_ms": percentiles(latencies),
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
