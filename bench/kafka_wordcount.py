"""Kafka word count on the local cluster against the source's bound, in one run.

Starts a KRaft broker from the fetched jars and a lab (ZooKeeper + 3 ring
nodes), writes ``--lines`` lines to a 2-partition topic, then measures on that
same topic:

* a plain confluent-kafka consumer reading it all (the source's bound);
* ``KafkaSpout`` alone, driven in-process (its multilang output to memory);
* ``topologies/kafka_wordcount.py`` end to end (2 spout tasks, Storm's
  multilang JSON, checkpoints every ``--interval`` s): lines/s until the
  committed counts are exact, with the sink ``exactly-once`` and then
  ``at-least-once``;
* output latency: ``--latency-lines`` lines paced over ``--latency-s`` seconds,
  each carrying a unique token stamped with its send time; the token's count
  record's Kafka timestamp (set when the sink writes it, after its epoch
  committed) minus that stamp, p50 and p95.

    .venv/bin/python bench/kafka_wordcount.py --lines 20000
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

from bench.lab_session import bench_lab  # noqa: E402
from sr3.errors import SR3Error  # noqa: E402
from sr3_cli.daemons.kafka import KafkaBroker  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402
from sr3_cli.output import table  # noqa: E402
from storm_bridge.kafka import KafkaSpout  # noqa: E402
from storm_bridge.runner import RunOptions, run_topology  # noqa: E402
from storm_bridge.wiring import RingAccess  # noqa: E402

FILE = ROOT / "topologies" / "kafka_wordcount.py"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def lines_of(count: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j) % 10] for j in range(6)) for i in range(count)]


def topic(admin: AdminClient, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, name: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, value in enumerate(values):
        producer.produce(name, value=value.encode(), partition=i % 2)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)


def plain_consumer(bootstrap: str, name: str, total: int) -> float:
    """Records/s of one consumer reading ``total`` records from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in (0, 1)])
    started, seen = time.perf_counter(), 0
    while seen < total:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    return total / seconds


def spout_alone(bootstrap: str, name: str, total: int) -> float:
    """Records/s of KafkaSpout's next_tuple loop, both partitions, emits to memory."""
    spout = KafkaSpout(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    spout.serializer.output_stream = io.StringIO()  # the multilang JSON, in memory
    context = {"componentid": "lines", "taskid": 1, "task->component": {"1": "lines"}}
    spout.initialize(
        {"sr3.kafka.bootstrap": bootstrap, "sr3.kafka.topics": name}, context
    )
    spout.seek(None)
    started = time.perf_counter()
    while spout.emitted < total:
        spout.next_tuple()
    seconds = time.perf_counter() - started
    spout.seek(None)
    return total / seconds


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--latency-lines", type=int, default=600)
    parser.add_argument("--latency-s", type=float, default=12.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="sr3-kafka-bench-") as tmp,
        bench_lab(3) as lab,
    ):
        broker = KafkaBroker(Path(tmp) / "kafka")
        bootstrap = broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            text = lines_of(args.lines)
            source = topic(admin, "lines")
            produce(bootstrap, source, text)
            results: dict[str, Any] = {
                "lines": args.lines,
                "plain_consumer_records_per_s": round(
                    plain_consumer(bootstrap, source, args.lines)
                ),
                "kafka_spout_alone_records_per_s": round(
                    spout_alone(bootstrap, source, args.lines)
                ),
            }
            rates: dict[str, list[int]] = {}
            lats: dict[str, list[float]] = {}
            # ABBA order: warm-up and drift fall on both guarantees alike
            order = ["exactly-once", "at-least-once"]
            for guarantee in [*order, *reversed(order)]:
                run_conf = conf(
                    bootstrap, source, topic(admin, "counts"), guarantee, args.interval
                )
                rates.setdefault(guarantee, []).append(
                    round(topology_rate(lab, run_conf, text))
                )
                lats.setdefault(guarantee, []).extend(
                    latency(lab, bootstrap, admin, guarantee, args)
                )
            for guarantee in order:
                lat = sorted(lats[guarantee])
                results[f"topology_{guarantee}_lines_per_s"] = {
                    "median": statistics.median(rates[guarantee]),
                    "runs": rates[guarantee],
                }
                results[f"latency_{guarantee}_s"] = {
                    "p50": round(statistics.median(lat), 3),
                    "p95": round(lat[int(len(lat) * 0.95)], 3),
                    "n": len(lat),
                }
        finally:
            broker.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    rows = [[k, json.dumps(v)] for k, v in results.items()]
    print(f"Kafka word count, checkpoint interval {args.interval:g} s")
    print(table(["measure", "value"], rows))


if __name__ == "__main__":
    main()
