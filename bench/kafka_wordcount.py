"""Kafka word count: local cluster, real Storm and Spark against the source's bound.

Starts a KRaft broker from the fetched jars, a lab (ZooKeeper + 3 ring nodes)
and an Apache Storm 2.8.3 cluster (Nimbus + 1 supervisor, 2 slots), writes
``--lines`` lines to a 2-partition topic, then measures on that same topic, in
one run:

* a plain confluent-kafka consumer reading it all (the source's bound);
* ``KafkaSpout`` alone, driven in-process (its multilang output to memory);
* ``topologies/kafka_wordcount.py`` end to end (2 spout tasks, Storm's
  multilang JSON, checkpoints every ``--interval`` s): lines/s until the
  committed counts are exact, with the sink ``exactly-once`` and then
  ``at-least-once`` (ABBA order);
* the same file on real Storm (``sr3 run --engine apache-storm``'s
  ``run_on_storm``, native checkpoints at the same interval), both guarantees:
  lines/s over the run's own clock (first control record to the final commit;
  jar upload and worker start-up are reported apart);
* the same file on Spark (``sr3 run --engine spark`` as a subprocess): lines/s
  over its report's seconds, or "not run" with the reason when that path fails;
* output latency: ``--latency-lines`` lines paced over ``--latency-s`` seconds,
  each carrying a unique token stamped with its send time; the token's count
  record's Kafka timestamp (set when the sink writes it, after its epoch
  committed) minus that stamp, p50 and p95.

    .venv/bin/python bench/kafka_wordcount.py --lines 20000

Writes ``bench/results/kafka_wordcount.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
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
from bench.storm_apache import storm_cluster  # noqa: E402
from sr3.errors import SR3Error  # noqa: E402
from sr3_cli.daemons.kafka import KafkaBroker  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402
from sr3_cli.output import table  # noqa: E402
from storm_bridge.kafka import KafkaSpout  # noqa: E402
from storm_bridge.runner import RunOptions, run_topology  # noqa: E402
from storm_bridge.sparse.run import StormRunOptions, run_on_storm  # noqa: E402
from storm_bridge.wiring import RingAccess  # noqa: E402

FILE = ROOT / "topologies" / "kafka_wordcount.py"
RESULTS = ROOT / "bench" / "results"
GUARANTEES = ("exactly-once", "at-least-once")
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


def measure(args: argparse.Namespace, tmp: Path, lab: Lab) -> dict[str, Any]:
    """Every measure of one run, on one broker, one lab and one Storm cluster."""
    broker = KafkaBroker(tmp / "kafka")
    bootstrap = broker.start()
    cluster = storm_cluster(lab, tmp / "storm")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        text = lines_of(args.lines)
        source = topic(admin, "lines")
        produce(bootstrap, source, text)
        results: dict[str, Any] = {
            "lines": args.lines,
            "interval_s": args.interval,
            # 2 shared cores: the load says how far to trust the ratios
            "load_1min_at_start": round(os.getloadavg()[0], 1),
            "plain_consumer_records_per_s": round(
                plain_consumer(bootstrap, source, args.lines)
            ),
            "kafka_spout_alone_records_per_s": round(
                spout_alone(bootstrap, source, args.lines)
            ),
        }
        print(json.dumps(results), flush=True)
        rates: dict[str, list[int]] = {}
        lats: dict[str, list[float]] = {}
        # ABBA order: warm-up and drift fall on both guarantees alike
        for guarantee in [*GUARANTEES, *reversed(GUARANTEES)]:
            run_conf = conf(
                bootstrap, source, topic(admin, "counts"), guarantee, args.interval
            )
            rates.setdefault(guarantee, []).append(
                round(topology_rate(lab, run_conf, text))
            )
            lats.setdefault(guarantee, []).extend(
                latency(lab, bootstrap, admin, guarantee, args)
            )
            print(guarantee, rates[guarantee][-1], flush=True)
        for guarantee in GUARANTEES:
            lat = sorted(lats[guarantee])
            results[f"local_{guarantee}"] = {
                "lines_per_s": statistics.median(rates[guarantee]),
                "runs": rates[guarantee],
                "latency_p50_s": round(statistics.median(lat), 3),
                "latency_p95_s": round(lat[int(len(lat) * 0.95)], 3),
                "latency_n": len(lat),
            }
        cluster.start()
        for guarantee in GUARANTEES:
            run_conf = conf(
                bootstrap, source, topic(admin, "counts"), guarantee, args.interval
            )
            results[f"storm_{guarantee}"] = storm_rate(
                lab, cluster.nimbus, run_conf, args.lines
            )
            print(guarantee, results[f"storm_{guarantee}"], flush=True)
        cluster.stop()
        for guarantee in GUARANTEES if not args.no_spark else ():
            run_conf = conf(
                bootstrap, source, topic(admin, "counts"), guarantee, args.interval
            )
            results[f"spark_{guarantee}"] = spark_rate(lab, run_conf, args.lines)
            print(guarantee, results[f"spark_{guarantee}"], flush=True)
            if "not_run" in results[f"spark_{guarantee}"]:
                break
        results["load_1min_at_end"] = round(os.getloadavg()[0], 1)
    finally:
        cluster.stop()
        broker.stop()
    return results


def rows_of(results: dict[str, Any]) -> list[list[str]]:
    """Table rows: what, lines/s, ratio to the plain consumer, EO/ALO, latency."""
    bound = results["plain_consumer_records_per_s"]
    rows = [
        ["plain confluent-kafka consumer (bound)", f"{bound:,}", "1.00", "", ""],
        [
            "KafkaSpout alone (next_tuple, in-process)",
            f"{results['kafka_spout_alone_records_per_s']:,}",
            f"{results['kafka_spout_alone_records_per_s'] / bound:.2f}",
            "",
            "",
        ],
    ]
    for engine, label in (
        ("local", "local cluster"),
        ("storm", "Apache Storm 2.8.3"),
        ("spark", "Spark"),
    ):
        eo = results.get(f"{engine}_exactly-once")
        alo = results.get(f"{engine}_at-least-once")
        for guarantee, cell in (("exactly-once", eo), ("at-least-once", alo)):
            name = f"{label}, sink {guarantee}"
            if cell is None or "not_run" in cell:
                reason = (cell or {}).get("not_run", "not run")
                rows.append([name, "not run", "", "", reason])
                continue
            rate = cell["lines_per_s"]
            vs = ""
            if guarantee == "exactly-once" and alo and "lines_per_s" in alo:
                vs = f"{rate / alo['lines_per_s']:.2f}"
            lat = (
                f"p50 {cell['latency_p50_s']} s, p95 {cell['latency_p95_s']} s"
                if "latency_p50_s" in cell
                else f"start-up {cell['startup_s']} s"
                if "startup_s" in cell
                else ""
            )
            rows.append([name, f"{rate:,}", f"{rate / bound:.3f}", vs, lat])
    return rows


HEADERS = ["measure", "lines/s", "/ bound", "EO / ALO", "output latency or note"]


def plot(results: dict[str, Any], path: Path) -> None:
    """Bars of lines/s per configuration (log scale) and the latency of both sinks."""
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels, values = [], []
    for row in rows_of(results):
        if row[1] != "not run":
            labels.append(row[0].replace(", sink ", "\n"))
            values.append(float(row[1].replace(",", "")))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]}
    )
    left.barh(labels, values, color="tab:blue")
    left.set_xscale("log")
    left.invert_yaxis()
    left.set_xlabel("lines (records) per second, log scale")
    left.set_title(f"Kafka word count, {results['lines']:,} lines")
    for guarantee, x in zip(GUARANTEES, (0, 1), strict=True):
        cell = results[f"local_{guarantee}"]
        right.bar(
            [x - 0.2, x + 0.2],
            [cell["latency_p50_s"], cell["latency_p95_s"]],
            width=0.4,
            color=["tab:green", "tab:orange"],
        )
    right.set_xticks([0, 1], ["exactly-once", "at-least-once"])
    right.set_ylabel("s from send to visible count (p50 green, p95 orange)")
    right.set_title(f"output latency, interval {results['interval_s']:g} s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--latency-lines", type=int, default=600)
    parser.add_argument("--latency-s", type=float, default=12.0)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="sr3-kafka-bench-") as tmp,
        bench_lab(3) as lab,
    ):
        results = measure(args, Path(tmp), lab)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kafka_wordcount.json").write_text(json.dumps(results, indent=2) + "\n")
    text = table(HEADERS, rows_of(results))
    title = (
        f"Kafka word count, {args.lines:,} lines, 2 partitions, checkpoint "
        f"interval {args.interval:g} s; 1-min load average "
        f"{results.get('load_1min_at_start')} at start, "
        f"{results.get('load_1min_at_end')} at end (2 cores)"
    )
    (RESULTS / "kafka_wordcount.md").write_text(f"{title}\n\n{text}\n")
    plot(results, RESULTS / "kafka_wordcount.png")
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(title)
    print(text)


if __name__ == "__main__":
    main()
