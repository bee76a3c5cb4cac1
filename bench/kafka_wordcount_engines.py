"""Word count runs of bench/kafka_wordcount.py on the local cluster, Storm and Spark.

Each runs ``topologies/kafka_wordcount.py`` unchanged with the sink's guarantee
and checkpoint interval in its conf: lines/s on the local cluster until the
committed counts are exact, output latency there, and lines/s on real Storm and
on Spark (or why that run did not happen).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.kafka_wordcount_source import topic
from sr3.errors import SR3Error
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.sparse.run import StormRunOptions, run_on_storm
from storm_bridge.wiring import RingAccess

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "topologies" / "kafka_wordcount.py"
GUARANTEES = ("exactly-once", "at-least-once")


def conf(
    bootstrap: str, lines: str, counts: str, guarantee: str, interval: float
) -> dict[str, Any]:
    return {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
        "sr3.kafka.sink.guarantee": guarantee,
        "sr3.checkpoint.interval.s": interval,
    }


def topology_rate(lab: Lab, run_conf: dict[str, Any], text: list[str]) -> float:
    """Lines/s from the run's start until the committed counts are exact."""
    want = dict(Counter(w for line in text for w in line.split()))
    ring, watcher = RingAccess(lab.config()), RingAccess(lab.config())
    done: list[float] = []

    def watch(started: float) -> None:
        while not done:
            try:
                _e, state = watcher.committed_state("kafka_wordcount", "count")
            except SR3Error:  # nothing committed yet
                state = {}
            if {k[0]: v["n"] for k, v in state.items()} == want:
                done.append(time.perf_counter() - started)
                return
            time.sleep(0.05)  # polling the committed state

    started = time.perf_counter()
    thread = threading.Thread(target=watch, args=(started,), daemon=True)
    thread.start()
    try:
        run_topology(
            FILE,
            ring=ring,
            options=RunOptions(until_idle=True, conf=run_conf, timeout_s=600),
        )
    finally:
        if not done:
            done.append(float("nan"))
        thread.join(5)
        ring.close()
        watcher.close()
    return len(text) / done[0]


def latency(
    lab: Lab,
    bootstrap: str,
    admin: AdminClient,
    guarantee: str,
    args: argparse.Namespace,
) -> list[float]:
    """Seconds from a line's send to its token's count record, per line."""
    lines, counts = topic(admin, "lat-lines"), topic(admin, "lat-counts")
    ring = RingAccess(lab.config())
    run_conf = {
        **conf(bootstrap, lines, counts, guarantee, args.interval),
        "sr3.idle.quiet.s": 4,
    }

    def feed() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        gap = args.latency_s / args.latency_lines
        for i in range(args.latency_lines):
            stamp = time.time()
            producer.produce(
                lines, value=f"alpha bravo t{stamp:.6f}".encode(), partition=i % 2
            )
            producer.poll(0)
            time.sleep(gap)  # pacing the input, not waiting for readiness
        producer.flush(30)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        run_topology(
            FILE,
            ring=ring,
            options=RunOptions(until_idle=True, conf=run_conf, timeout_s=300),
        )
    finally:
        feeder.join()
        ring.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lat",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(counts, p, OFFSET_BEGINNING) for p in (0, 1)])
    out: list[float] = []
    idle = 0
    while idle < 5:
        batch = consumer.consume(1000, 1.0)
        idle = 0 if batch else idle + 1
        for m in batch:
            row = json.loads(m.value() or b"{}")
            if str(row.get("word", "")).startswith("t"):
                out.append(m.timestamp()[1] / 1000 - float(row["word"][1:]))
    consumer.close()
    return out


def storm_rate(
    lab: Lab, nimbus: str, run_conf: dict[str, Any], lines: int
) -> dict[str, Any]:
    """Lines/s of the file on real Storm, over the run's clock (start-up apart)."""
    ring = RingAccess(lab.config())
    try:
        report = run_on_storm(
            FILE,
            ring=ring,
            nimbus=nimbus,
            options=StormRunOptions(until_idle=True, conf=run_conf, timeout_s=600),
            secret_in_conf=False,
        )
    finally:
        ring.close()
    if not report["idle"]:
        return {"not_run": f"the run did not finish: {report['busy']}"}
    return {
        "lines_per_s": round(lines / report["seconds"]),
        "seconds": report["seconds"],
        "startup_s": report["startup_s"],
    }


def spark_rate(lab: Lab, run_conf: dict[str, Any], lines: int) -> dict[str, Any]:
    """Lines/s of ``sr3 run --engine spark``, or why it did not run."""
    options = [a for k, v in run_conf.items() for a in ("-o", f"{k}={v}")]
    cmd = [sys.executable, "-m", "sr3_cli", "run", str(FILE), "--engine", "spark",
           "--lab", str(lab.root), "--until-idle", "--json", "--timeout", "300",
           *options]  # fmt: skip
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    try:
        proc = subprocess.run(  # noqa: S603 (our CLI, our arguments)
            cmd, capture_output=True, text=True, timeout=420, env=environ,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"not_run": "sr3 run --engine spark did not end within 420 s"}
    if proc.returncode != 0:
        lines_of_err = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        reason = lines_of_err[-1] if lines_of_err else f"exit {proc.returncode}"
        return {"not_run": f"sr3 run --engine spark failed: {reason[:300]}"}
    report = json.loads(proc.stdout)
    if not report.get("idle"):
        return {"not_run": f"the Spark run did not finish: {report.get('busy')}"}
    return {
        "lines_per_s": round(lines / report["seconds"]),
        "seconds": report["seconds"],
    }
