"""Kafka word count on the Spark engine: Spark's own Kafka source, exactly-once output.

``topologies/kafka_wordcount.py``, unchanged, on Spark: its ``KafkaSpout``
reads through ``spark-sql-kafka-0-10`` from the offsets in our epochs, and its
``KafkaSink`` writes each committed micro-batch in one Kafka transaction, with
a ring node killed mid-run. Exactly once for this running-count stream: read
``read_committed``, the output topic holds each ``(word, n)`` for ``n = 1 ..
final count`` once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.kafka import KafkaTopicMissingError
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    produce,
    read_all,
    topology_file,
)
from tests.integration.kafka.test_kafka_wordcount import corpus

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.spark, pytest.mark.slow]

FILE = topology_file("kafka_wordcount.py")


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def conf_for(bootstrap: str, lines: str, counts: str) -> dict[str, Any]:
    return {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
    }


def test_spark_word_count_from_kafka_has_exact_state_and_output_once(
    spark: SparkSession,
    lab: Lab,
    ring: RingAccess,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    tmp_path: Path,
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    text = corpus(400, seed=3)
    produce(kafka_bootstrap, lines, [t.encode() for t in text], partitions=2)
    conf = conf_for(kafka_bootstrap, lines, counts)

    # stopped after its first micro-batch (Spark may not have logged its commit
    # yet, so the next run may run that batch again), then resumed from the
    # same Spark checkpoint: the marker in Kafka keeps the output exactly once
    first = run_spark(
        FILE,
        checkpoint_dir=tmp_path / "ck",
        spark=spark,
        ring=ring,
        conf=conf,
        max_rows_per_batch=250,
        stop_after_batches=1,
    )
    assert first["idle"] is False
    # a ring node dies between the legs: the resumed run writes its epochs to
    # the two left (write quorum 2 of r=3) and the state reads back from them
    lab.kill_nodes(["node-1"])
    report = run_spark(
        FILE,
        checkpoint_dir=tmp_path / "ck",
        spark=spark,
        ring=ring,
        conf=conf,
        max_rows_per_batch=250,
    )

    assert report["idle"] is True
    assert report["started_from"] == "spark checkpoint"
    expected = Counter(w for line in text for w in line.split())
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    assert {k[0]: v["n"] for k, v in state.items()} == dict(expected)
    # the epoch records where each spout task stopped, as the Storm spout does:
    # partition 0 dealt to task 0, partition 1 to task 1, 200 records each
    record = ring.committed("kafka_wordcount")
    assert record is not None
    assert record.offsets == {
        "lines/0": {f"{lines}:0": 200},
        "lines/1": {f"{lines}:1": 200},
    }
    out = read_all(kafka_bootstrap, counts)
    pairs = Counter((r["word"], r["count"]) for r in out)
    assert {p: n for p, n in pairs.items() if n > 1} == {}
    want = {(w, n) for w, total in expected.items() for n in range(1, total + 1)}
    assert set(pairs) == want


def test_spark_names_a_missing_topic_and_how_to_create_it(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    conf = conf_for(kafka_bootstrap, "no-such-lines", "no-such-counts")

    with pytest.raises(KafkaTopicMissingError) as info:
        run_spark(FILE, checkpoint_dir=tmp_path / "ck", spark=spark, conf=conf)

    message = str(info.value)
    assert "Kafka topic no-such-lines does not exist" in message
    assert "sr3 lab topic no-such-lines" in message
