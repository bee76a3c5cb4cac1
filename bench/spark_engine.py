"""The Spark engine against the Storm engine's local cluster, and SR3's cost on Spark.

For each example topology (wordcount, ysb, linear_road), in the same run and on
the same embedded lab (ZooKeeper + 3 ring nodes):

- the Storm engine's local cluster (multilang subprocesses, checkpoints every
  second into the ring), ``sr3 run --until-idle``;
- the Spark engine on local[2] with SR3 on (every micro-batch's changed state
  written to the ring and committed in ZooKeeper);
- the Spark engine with SR3 off (Spark's own checkpoint only).

Records/s is spout records over the run's wall time (the Spark session is
started once and warmed up with a small query before the runs, as a
long-running Spark application would be; each Spark run still pays its query
start and first micro-batch; each Storm run pays its worker processes' start).
Printed: a table, the Spark/Storm throughput ratio, micro-batch latency
percentiles, SR3's share of micro-batch time; written:
``bench/results/spark_engine.{json,md,png}``.

    .venv/bin/python bench/spark_engine.py            # make bench-spark
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.lab_session import bench_lab  # noqa: E402
from sr3.config import Sr3Config  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402
from sr3_cli.output import table  # noqa: E402

RESULTS = REPO / "bench" / "results"
TOPOLOGIES = {
    "wordcount": ("count", lambda scale: {"wordcount.lines": 20000 * scale}),
    "ysb": ("window_count", lambda scale: {"ysb.events": 100000 * scale}),
    "linear_road": (
        "tolls",
        lambda scale: {"lr.vehicles": 300 * scale, "lr.minutes": 10},
    ),
}


def _storm(path: Path, ring: Any, conf: dict[str, Any]) -> dict[str, Any]:
    from storm_bridge.runner import RunOptions, run_topology  # noqa: PLC0415

    report = run_topology(
        path, ring=ring, options=RunOptions(until_idle=True, conf=conf)
    ).to_dict()
    records = report["throughput"]["spout_tuples"]
    return {
        "records": records,
        "seconds": report["seconds"],
        "records_per_s": records / report["seconds"],
        "state": report["state"],
    }


def _spark(  # noqa: PLR0913 (the run's knobs)
    spark: Any,
    path: Path,
    ring: Any,
    conf: dict[str, Any],
    rows: int,
    tmp: Path,
) -> dict[str, Any]:
    from spark_bridge.runner import run_topology  # noqa: PLC0415

    report = run_topology(
        path,
        checkpoint_dir=tmp,
        spark=spark,
        ring=ring,
        conf=conf,
        max_rows_per_batch=rows,
    )
    records = report["throughput"]["spout_tuples"]
    return {
        "records": records,
        "seconds": report["seconds"],
        "records_per_s": records / report["seconds"],
        "batches": report["micro_batches"]["count"],
        "latency_ms": report["micro_batches"]["latency_ms"],
        "sr3_seconds": report["micro_batches"]["sr3_seconds"],
        "sr3_share": report["micro_batches"]["sr3_share"],
        "ring_commit_mean_s": report["checkpoints"]["mean_duration_s"],
        "state": report["state"],
    }


def _session(partitions: int) -> Any:
    from spark_bridge.runner import spark_session  # noqa: PLC0415

    session = spark_session("local[2]", app_name="sr3-bench-spark")
    session.conf.set("spark.sql.shuffle.partitions", str(partitions))
    session.sparkContext.setLogLevel("ERROR")
    return session


def measure(args: argparse.Namespace, lab: Lab) -> dict[str, Any]:
    """Run every topology on every engine ``args.repeats`` times."""
    from backend.access import RingAccess  # noqa: PLC0415

    ring = RingAccess(lab.config(Sr3Config.from_env()))
    spark = _session(args.partitions)
    results: dict[str, Any] = {}
    try:
        # Warm-up: the first query of a session pays JVM class loading and
        # Python worker start-up; keep that out of every measured run.
        with tempfile.TemporaryDirectory(prefix="sr3-bench-ck-") as ck:
            _spark(
                spark,
                REPO / "topologies" / "wordcount.py",
                None,
                {"wordcount.lines": 200},
                args.rows,
                Path(ck),
            )
        for name in args.topologies:
            _component, make_conf = TOPOLOGIES[name]
            conf = make_conf(args.scale)
            path = REPO / "topologies" / f"{name}.py"
            runs: dict[str, list[dict[str, Any]]] = {
                "storm": [],
                "spark_sr3": [],
                "spark_plain": [],
            }
            for repeat in range(args.repeats):
                print(f"# {name} repeat {repeat + 1}/{args.repeats}", file=sys.stderr)
                runs["storm"].append(_storm(path, ring, conf))
                # alternate which Spark variant runs first: the later one finds
                # the JVM's code for this plan warmer
                variants = [("spark_sr3", ring), ("spark_plain", None)]
                for engine, access in variants[:: 1 if repeat % 2 == 0 else -1]:
                    with tempfile.TemporaryDirectory(prefix="sr3-bench-ck-") as ck:
                        runs[engine].append(
                            _spark(spark, path, access, conf, args.rows, Path(ck))
                        )
            results[name] = {"conf": conf, "runs": runs}
    finally:
        ring.close()
    return results


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per topology and engine, medians over repeats."""
    rows = []
    for name, data in results.items():
        runs = data["runs"]
        storm_rate = _median(runs["storm"], "records_per_s")
        plain_batch = [
            float(r["latency_ms"]["p50"])
            for r in runs["spark_plain"]
            if r["latency_ms"]["p50"] is not None
        ]
        for engine in ("storm", "spark_sr3", "spark_plain"):
            group = runs[engine]
            rate = _median(group, "records_per_s")
            row: dict[str, Any] = {
                "topology": name,
                "engine": engine,
                "records": int(_median(group, "records")),
                "seconds": round(_median(group, "seconds"), 2),
                "records_per_s": round(rate),
                "vs_storm": round(rate / storm_rate, 2),
            }
            if engine != "storm":
                lats = [r["latency_ms"] for r in group]
                for q in ("p50", "p90", "p99"):
                    vals = [float(lat[q]) for lat in lats if lat[q] is not None]
                    row[f"batch_{q}_ms"] = (
                        round(statistics.median(vals)) if vals else None
                    )
                row["batches"] = int(_median(group, "batches"))
                row["sr3_share"] = (
                    round(_median(group, "sr3_share"), 4)
                    if engine == "spark_sr3"
                    else None
                )
                if engine == "spark_sr3" and plain_batch and row["batch_p50_ms"]:
                    row["p50_vs_plain"] = round(
                        row["batch_p50_ms"] / statistics.median(plain_batch), 3
                    )
            rows.append(row)
    return rows


def _plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = sorted({r["topology"] for r in rows})
    engines = ["storm", "spark_sr3", "spark_plain"]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.27
    for i, engine in enumerate(engines):
        rates = [
            next(
                r["records_per_s"]
                for r in rows
                if r["topology"] == n and r["engine"] == engine
            )
            for n in names
        ]
        ax.bar([x + i * width for x in range(len(names))], rates, width, label=engine)
    ax.set_xticks([x + width for x in range(len(names))], names)
    ax.set_ylabel("spout records/s (wall)")
    ax.set_title("Spark engine (local[2]) vs Storm engine local cluster")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--topologies", nargs="+", default=list(TOPOLOGIES), choices=list(TOPOLOGIES)
    )
    parser.add_argument("--scale", type=int, default=3, help="input size multiplier")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20000, help="max rows per batch")
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with bench_lab(3) as lab:
        results = measure(args, lab)
    rows = summarize(results)
    headers = [
        "topology",
        "engine",
        "records",
        "s",
        "records/s",
        "x storm",
        "batches",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "SR3 share",
    ]
    body = [
        [
            r["topology"],
            r["engine"],
            r["records"],
            r["seconds"],
            r["records_per_s"],
            r["vs_storm"],
            r.get("batches", ""),
            r.get("batch_p50_ms", ""),
            r.get("batch_p90_ms", ""),
            r.get("batch_p99_ms", ""),
            "" if r.get("sr3_share") is None else f"{100 * r['sr3_share']:.1f}%",
        ]
        for r in rows
    ]
    text = table(headers, body)
    print(text)
    wc = {r["engine"]: r for r in rows if r["topology"] == "wordcount"}
    lines = []
    if wc:
        ratio = wc["spark_sr3"]["vs_storm"]
        share = wc["spark_sr3"]["sr3_share"]
        lines.append(
            f"wordcount: Spark (SR3 on) / Storm local cluster = {ratio}x "
            f"(target >= 5x: {'MET' if ratio >= 5 else 'NOT MET'})"
        )
        if share is not None:
            lines.append(
                f"wordcount: SR3 share of micro-batch time = {100 * share:.1f}% "
                f"(target <= 10%: {'MET' if share <= 0.10 else 'NOT MET'})"
            )
    for line in lines:
        print(line)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spark_engine.json").write_text(
        json.dumps({"rows": rows, "raw": results}, indent=2, default=str),
        encoding="utf-8",
    )
    (RESULTS / "spark_engine.md").write_text(
        "```\n" + text + "\n" + "\n".join(lines) + "\n```\n", encoding="utf-8"
    )
    _plot(rows, RESULTS / "spark_engine.png")
    print(f"results: {RESULTS}/spark_engine.{{json,md,png}}")


if __name__ == "__main__":
    main()
