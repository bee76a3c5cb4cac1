"""Spark Kafka word count on a lab's standalone Spark, an executor killed or not.

Needs a lab with a ring, a Kafka broker and a Spark standalone cluster::

    sr3 lab up --dir LAB --nodes 3 --kafka --spark
    PYTHONPATH=. python bench/spark_kafka_kill.py --lab LAB [--lines 1200]

Each mode gets fresh topics and starts from empty state (``--fresh``); the
driver is ``python -m spark_bridge`` against the lab's master. ``executor-kill``
SIGKILLs every executor of the worker once the first micro-batch committed.
Prints one JSON line per mode: the run's throughput (spout tuples/s, the
session start left out), micro-batch latencies, how long the worker took to
launch a new executor, and whether the counts and the output topic were exact.
One run per mode: on a shared machine, read the figures as one sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sr3_cli.lab import Lab
from sr3_cli.lab_spark import spark_cluster

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "topologies" / "kafka_wordcount.py"
WORDS = ["storm", "spark", "ring", "kafka", "epoch", "shard"]


def _topic(admin: AdminClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(name, 2, 1)]).values():
        future.result(30)
    time.sleep(1)  # metadata propagation to the broker's other listeners
    return name


def _read(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, 10)[1] for tp in parts}
    consumer.assign(parts)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out.extend(json.loads(m.value()) for m in consumer.consume(1000, 0.2))
        pos = consumer.position([TopicPartition(topic, p) for p in (0, 1)])
        if all(tp.offset >= ends[tp.partition] for tp in pos):
            break
    consumer.close()
    return out


def run(lab: Lab, mode: str, lines: int, rows: int, work: Path) -> dict[str, Any]:
    """Run one mode; return its figures."""
    bootstrap = str((lab.kafka or {})["bootstrap"])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    src, dst = _topic(admin, "lines"), _topic(admin, "counts")
    rng = random.Random(7)  # noqa: S311 (bench data)
    text = [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(lines)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, line in enumerate(text):
        producer.produce(src, value=line.encode(), partition=i % 2)
    producer.flush(30)
    cluster = spark_cluster(lab)
    assert cluster is not None, "the lab runs no Spark cluster: sr3 lab up --spark"  # noqa: S101
    checkpoint = work / mode
    master = str((lab.spark or {})["master"])
    command = [
        sys.executable, "-m", "spark_bridge", str(FILE), "--fresh",
        "--master", master, "--checkpoint-dir", str(checkpoint),
        "--zk", lab.zk_hosts, "--chroot", lab.chroot,
        "--secret-file", str(lab.secret_file), "--max-rows-per-batch", str(rows),
        "--conf", f"sr3.kafka.bootstrap={bootstrap}",
        "--conf", f"sr3.kafka.topics={src}", "--conf", f"sr3.kafka.sink.topic={dst}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen(  # noqa: S603 (this interpreter)
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    replaced_s = None
    if mode == "executor-kill":
        commits = checkpoint / "spark" / "commits"
        while not (commits.is_dir() and any(commits.iterdir())):
            time.sleep(0.1)  # polling for the first commit
        victims = cluster.executor_pids()
        killed = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        while not [p for p in cluster.executor_pids() if p not in victims]:
            time.sleep(0.1)  # polling for the worker's new executor
        replaced_s = round(time.monotonic() - killed, 1)
    out, _ = driver.communicate(timeout=900)
    report = json.loads(out)
    want = Counter(w for line in text for w in line.split())
    pairs = Counter((r["word"], r["count"]) for r in _read(bootstrap, dst))
    every = {(w, n) for w, t in want.items() for n in range(1, t + 1)}
    return {
        "mode": mode,
        "lines": lines,
        "seconds": report["seconds"],
        "session_start_s": report["session_start_s"],
        "tuples_per_s": report["throughput"]["tuples_per_s"],
        "batches": report["batches"],
        "latency_ms": report["micro_batches"]["latency_ms"],
        "replacement_executor_s": replaced_s,
        "output_exactly_once": set(pairs) == every and max(pairs.values()) == 1,
    }


def main() -> None:
    """Run both modes and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", required=True)
    parser.add_argument("--lines", type=int, default=1200)
    parser.add_argument("--rows-per-batch", type=int, default=200)
    parser.add_argument("--work", default="/tmp/sr3-bench-spark-kafka")  # noqa: S108
    args = parser.parse_args()
    lab = Lab.load(Path(args.lab).resolve())
    for mode in ("steady", "executor-kill"):
        figures = run(lab, mode, args.lines, args.rows_per_batch, Path(args.work))
        print(json.dumps(figures), flush=True)  # noqa: T201 (the bench's output)


if __name__ == "__main__":
    main()
