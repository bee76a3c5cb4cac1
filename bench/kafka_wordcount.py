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
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient  # noqa: E402 - after the sys.path insert

from bench.kafka_wordcount_engines import (  # noqa: E402 - after the sys.path insert
    GUARANTEES,
    conf,
    latency,
    spark_rate,
    storm_rate,
    topology_rate,
)
from bench.kafka_wordcount_report import HEADERS, plot, rows_of  # noqa: E402 - after the sys.path insert
from bench.kafka_wordcount_source import (  # noqa: E402 - after the sys.path insert
    lines_of,
    plain_consumer,
    produce,
    spout_alone,
    topic,
)
from bench.lab_session import bench_lab  # noqa: E402 - after the sys.path insert
from bench.storm_apache import storm_cluster  # noqa: E402 - after the sys.path insert
from sr3_cli.daemons.kafka import KafkaBroker  # noqa: E402 - after the sys.path insert
from sr3_cli.lab import Lab  # noqa: E402 - after the sys.path insert
from sr3_cli.output import table  # noqa: E402 - after the sys.path insert

RESULTS = ROOT / "bench" / "results"


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
