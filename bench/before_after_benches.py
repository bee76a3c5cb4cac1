"""The benchmarks bench/backend_before_after.py compares, and how each is read.

Each runs at small sizes; its reader turns the benchmark's own machine-readable
output (``recovery.json``, ``storm_checkpoint.py --json``, ``spark_engine.json``)
into named metrics.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Metric:
    """One figure a benchmark reports; ``better`` is "higher", "lower" or ""."""

    bench: str
    name: str
    unit: str
    better: str


@dataclass(frozen=True)
class Bench:
    """An existing benchmark: its script, small-size options and its reader."""

    name: str
    script: str
    options: tuple[str, ...]
    metrics: tuple[Metric, ...]
    read: Callable[[Path, str], dict[str, float]]


def _recovery(tree: Path, _stdout: str) -> dict[str, float]:
    rows = json.loads((tree / "bench" / "results" / "recovery.json").read_text())
    got = {}
    for row in rows:
        if row.get("failures") == 0 and row.get("epochs") == 1:
            got[f"{row['mechanism']} resume s"] = float(row["time_to_resume_s"])
    return got


def _checkpoint(_tree: Path, stdout: str) -> dict[str, float]:
    start = re.search(r"^\{", stdout, re.MULTILINE)
    if start is None:
        msg = f"storm_checkpoint.py printed no JSON: {stdout[-500:]!r}"
        raise RuntimeError(msg)
    results, _end = json.JSONDecoder().raw_decode(stdout[start.start() :])
    got = {}
    for serializer, modes in results.items():
        off = float(modes["off"]["tuples_per_s"])
        on = float(modes["on"]["tuples_per_s"])
        got[f"{serializer} off tuples/s"] = off
        got[f"{serializer} every 1 s tuples/s"] = on
        got[f"{serializer} off/on"] = off / on
    return got


def _spark(tree: Path, _stdout: str) -> dict[str, float]:
    data = json.loads((tree / "bench" / "results" / "spark_engine.json").read_text())
    got = {}
    for row in data["rows"]:
        prefix = f"{row['topology']} {row['engine']}"
        got[f"{prefix} records/s"] = float(row["records_per_s"])
        if row["engine"] == "spark_sr3":
            got[f"{prefix} batch p50 ms"] = float(row["batch_p50_ms"] or "nan")
            got[f"{prefix} SR3 share"] = float(row["sr3_share"] or "nan")
    return got


BENCHES = (
    Bench(
        "recovery",
        "bench/recovery.py",
        # 100 MB of 1 KiB values, failure-free, no delta chain, raw loopback as
        # the control (its code is the same in both trees)
        (
            "--sizes", "100MB", "--shapes", "small", "--failures", "0",
            "--repeat", "3", "--baselines", "raw", "--delta-max", "1MB",
        ),
        tuple(
            Metric("recovery", f"{m} resume s", "s", "lower")
            for m in ("star", "line", "tree", "raw-loopback")
        ),
        _recovery,
    ),
    Bench(
        "checkpoint",
        "bench/storm_checkpoint.py",
        ("--lines", "5000", "--repeats", "1", "--json"),
        tuple(
            Metric("checkpoint", f"{s} {what}", unit, better)
            for s in ("json", "msgpack")
            for what, unit, better in (
                ("off tuples/s", "tuples/s", "higher"),
                ("every 1 s tuples/s", "tuples/s", "higher"),
                ("off/on", "ratio", ""),
            )
        ),
        _checkpoint,
    ),
    Bench(
        "spark",
        "bench/spark_engine.py",
        ("--topologies", "wordcount", "--scale", "1", "--repeats", "1"),
        (
            Metric("spark", "wordcount storm records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_sr3 records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_plain records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_sr3 batch p50 ms", "ms", "lower"),
            Metric("spark", "wordcount spark_sr3 SR3 share", "share", "lower"),
        ),
        _spark,
    ),
)  # fmt: skip
