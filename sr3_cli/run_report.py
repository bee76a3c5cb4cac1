"""The text report ``sr3 run`` prints (``--json`` prints the report's dict instead)."""

from __future__ import annotations

from typing import Any

from sr3_cli.output import table

__all__ = ["print_run_report"]

#: Distinct task errors the text report lists (``--json`` has them all).
_ERRORS_SHOWN = 3


def print_run_report(data: dict[str, Any]) -> None:
    """Print a run report of the Storm, Spark or Apache Storm engine as text."""
    tp = data["throughput"]
    engine = data.get("engine", "storm")
    if engine == "spark":
        batches = data["micro_batches"]
        lat = batches["latency_ms"]
        print(
            f"topology {data['topology']} on Spark ({data['master']}): "
            f"{data['seconds']} s, {tp['spout_tuples_per_s']} spout tuples/s "
            f"({tp['spout_tuples']} tuples; Spark session start "
            f"{data['session_start_s']} s not counted), started from "
            f"{data['started_from']}"
        )
        print(
            f"micro-batches: {batches['count']}, latency p50 {lat['p50']} ms, "
            f"p99 {lat['p99']} ms; SR3 ring writes {batches['sr3_seconds']} s "
            f"({batches['sr3_share']} of batch time)"
        )
    else:
        print(
            f"topology {data['topology']}: {data['seconds']} s, "
            f"{tp['tuples_per_s']} tuples/s processed by bolts "
            f"({tp['bolt_tuples']} tuples; spouts {tp['spout_tuples_per_s']}/s)"
        )
        lat = data.get("complete_latency_ms") or {}
        if lat.get("count"):
            print(
                f"complete latency (spout emit to tree acked): p50 {lat['p50']} ms, "
                f"p99 {lat['p99']} ms, max {lat['max']} ms ({lat['count']} trees)"
            )
    cp = data["checkpoints"]
    print(
        f"checkpoints: {cp.get('count', 0)} committed, last epoch "
        f"{cp.get('last_committed_epoch')}, mean {cp.get('mean_duration_s')} s "
        f"(interval {cp.get('interval_s', 'one per micro-batch')} s)"
    )
    rows = [
        [
            r["cause"],
            r["at_s"],
            f"{r['mechanism']} ({r['used']})",
            r["timeline"]["detect_s"],
            r["timeline"]["restore_s"],
            r["timeline"]["replay_s"],
        ]
        for r in data["recoveries"]
    ]
    if rows:
        headers = [
            "recovery of",
            "at s",
            "mechanism",
            "detect s",
            "restore s",
            "replay s",
        ]
        print(table(headers, rows))
    else:
        print("recoveries: none")
    for name, summary in data["state"].items():
        print(f"state {name}: {summary['keys']} keys at epoch {summary['epoch']}")
    if data["error_count"]:
        print(f"errors reported by tasks: {data['error_count']} (see --json)")
        for error in list(dict.fromkeys(data.get("errors", [])))[:_ERRORS_SHOWN]:
            print(f"  {error}")
    dead = data.get("dead_letters", {}).get("count", 0)
    if dead:
        print(f"dead letters: {dead} (see --json)")
    for failure in data.get("task_failures", []):
        if failure["outcome"] == "recovered":  # the others go to stderr
            print(failure["message"])
    if data.get("busy"):
        print(f"not idle: {data['busy']}")
