"""Storm -> Spark -> Storm on one Kafka topic: no gap, no duplicate.

``topologies/kafka_wordcount.py`` runs on the Storm engine (confluent-kafka
``KafkaSpout``), hands off to the Spark engine (Spark's own Kafka source,
started at the offsets Storm's last committed epoch recorded), which stops
mid-topic and hands back to Storm (started at the offsets Spark's epochs
recorded). Lines are produced before each leg. At the end the committed counts
are exact, the epoch's offsets are each partition's end, and the output topic,
read ``read_committed``, holds every ``(word, n)`` once, whichever engine
wrote it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from sr3_cli.daemons.kafka import KafkaBroker
from storm_bridge.runner import RunOptions
from storm_bridge.runner import run_topology as run_storm
from tests.e2e.conftest import require_zk
from tests.integration.conftest import running_lab
from tests.integration.kafka.conftest import (
    create_topic,
    produce,
    read_all,
    session_broker,
    topology_file,
)
from tests.integration.kafka.test_kafka_wordcount import corpus

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.zk,
    pytest.mark.spark,
    pytest.mark.storm,
    pytest.mark.slow,
]

FILE = topology_file("kafka_wordcount.py")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's one broker, shared with ``tests/integration/kafka/``."""
    broker, started = session_broker(tmp_path_factory)
    yield broker
    if started:
        broker.stop()


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[RingAccess]:
    require_zk()
    with running_lab(tmp_path / "lab") as lab:
        access = RingAccess(lab.config(Sr3Config()))
        try:
            yield access
        finally:
            access.close()


def test_storm_hands_off_to_spark_and_back_on_one_topic_without_gap_or_duplicate(
    spark: SparkSession, ring: RingAccess, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    suffix = tmp_path.name[-12:].replace("_", "-")
    lines = create_topic(admin, f"handoff-lines-{suffix}", 2)
    counts = create_topic(admin, f"handoff-counts-{suffix}", 2)
    conf: dict[str, Any] = {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
        "sr3.checkpoint.interval.s": 0.3,
    }
    legs = [corpus(200, seed=11), corpus(400, seed=12), corpus(200, seed=13)]

    def feed(text: list[str]) -> None:
        produce(bootstrap, lines, [t.encode() for t in text], partitions=2)

    feed(legs[0])
    first = run_storm(FILE, ring=ring, options=RunOptions(until_idle=True, conf=conf))
    assert first.idle is True, first.errors
    on_storm = ring.committed("kafka_wordcount")
    assert on_storm is not None
    assert on_storm.offsets == {
        "lines/0": {f"{lines}:0": 100},
        "lines/1": {f"{lines}:1": 100},
    }

    feed(legs[1])
    on_spark = run_spark(
        FILE,
        checkpoint_dir=tmp_path / "ck",
        spark=spark,
        ring=ring,
        conf=conf,
        resume=True,
        max_rows_per_batch=200,
        stop_after_batches=1,
    )
    assert on_spark["started_from"] == f"ring epoch {on_storm.epoch}"
    handed = ring.committed("kafka_wordcount")
    assert handed is not None
    assert handed.extra["engine"] == "spark"
    # Spark went on from Storm's offsets: one batch of 200 records, 100 a partition
    assert handed.offsets == {
        "lines/0": {f"{lines}:0": 200},
        "lines/1": {f"{lines}:1": 200},
    }

    feed(legs[2])
    back = run_storm(
        FILE, ring=ring, options=RunOptions(until_idle=True, conf=conf, resume=True)
    )
    assert back.idle is True, back.errors

    text = [line for leg in legs for line in leg]
    expected = Counter(w for line in text for w in line.split())
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    assert {k[0]: v["n"] for k, v in state.items()} == dict(expected)
    final = ring.committed("kafka_wordcount")
    assert final is not None
    assert final.offsets == {
        "lines/0": {f"{lines}:0": 400},
        "lines/1": {f"{lines}:1": 400},
    }
    out = read_all(bootstrap, counts)
    pairs = Counter((r["word"], r["count"]) for r in out)
    assert {p: n for p, n in pairs.items() if n > 1} == {}
    want = {(w, n) for w, total in expected.items() for n in range(1, total + 1)}
    assert set(pairs) == want
