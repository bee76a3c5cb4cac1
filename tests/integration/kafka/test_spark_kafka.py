"""Kafka word count on the Spark engine: Spark's own Kafka source, exactly-once output.

``topologies/kafka_wordcount.py``, unchanged, on Spark: its ``KafkaSpout``
reads through ``spark-sql-kafka-0-10`` from the offsets in our epochs, and its
``KafkaSink`` writes each committed micro-batch in one Kafka transaction, with
a ring node killed mid-run. Exactly once for this running-count stream: read
``read_committed``, the output topic holds each ``(word, n)`` for ``n = 1 ..
final count`` once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.errors import QueryFailedError
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from sr3.errors import SR3Error
from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.lab import Lab
from storm_bridge.kafka import KafkaTopicMissingError
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    assert_each_count_once,
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


def test_spark_waits_for_a_broker_down_at_start_and_during_a_run(
    spark: SparkSession,
    lab: Lab,
    ring: RingAccess,
    kafka_broker: KafkaBroker,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    wait_until: Any,
    tmp_path: Path,
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    first, second = corpus(400, seed=5), corpus(400, seed=6)
    produce(kafka_bootstrap, lines, [t.encode() for t in first], partitions=2)
    conf = conf_for(kafka_bootstrap, lines, counts)
    b = kafka_bootstrap
    outcome: list[Any] = []

    def leg() -> None:
        try:
            # runs until the test stops its query, once every count is in
            outcome.append(
                run_spark(
                    FILE,
                    checkpoint_dir=tmp_path / "ck",
                    spark=spark,
                    ring=ring,
                    conf=conf,
                    max_rows_per_batch=200,
                    until_idle=False,
                    duration_s=300,
                )
            )
        except Exception as exc:  # noqa: BLE001 (asserted below)
            outcome.append(exc)

    def counted() -> dict[str, int]:
        try:
            _e, state = ring.committed_state("kafka_wordcount", "count")
        except SR3Error:
            return {}
        return {k[0]: v["n"] for k, v in state.items()}

    kafka_broker.kill()
    thread = threading.Thread(target=leg, daemon=True)
    try:
        thread.start()
        # the driver waits for the broker before the query starts
        time.sleep(4)
        assert thread.is_alive(), outcome
        kafka_broker.start()
        want = Counter(w for line in first for w in line.split())
        wait_until(lambda: counted() == dict(want), timeout_s=180, what="first half")
        kafka_broker.kill()  # down during the run
        time.sleep(6)
        assert thread.is_alive(), outcome
        kafka_broker.start()
        produce(kafka_bootstrap, lines, [t.encode() for t in second], partitions=2)
        want = Counter(w for line in first + second for w in line.split())
        wait_until(lambda: counted() == dict(want), timeout_s=180, what="all counts")
        # the last micro-batch writes its outputs to Kafka after its epoch commits
        every = {(w, n) for w, t in want.items() for n in range(1, t + 1)}
        wait_until(
            lambda: every <= {(r["word"], r["count"]) for r in read_all(b, counts)},
            timeout_s=60,
            what="every output",
        )
        for query in spark.streams.active:
            query.stop()
        thread.join(60)
    finally:
        if not kafka_broker.running():
            kafka_broker.start()
    assert outcome, "the Spark run did not end once its query stopped"
    assert isinstance(outcome[0], dict), outcome[0]
    expected = Counter(w for line in first + second for w in line.split())
    assert_each_count_once(kafka_bootstrap, counts, expected)


def test_spark_sends_invalid_records_to_the_dead_letter_topic(
    spark: SparkSession,
    lab: Lab,
    ring: RingAccess,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    tmp_path: Path,
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    # one partition: the dead letters are keyless, and read_all waits for every
    # partition to be read to its end (an empty one never reports a position)
    dead = new_topic("dl", 1)
    text = corpus(60, seed=8)
    bad = [b"\xff\xfe", b"\xc3("]  # not UTF-8: invalid for sr3.kafka.format=text
    values = [t.encode() for t in text]
    # one bad record on each partition (produce deals round-robin)
    produce(kafka_bootstrap, lines, [*values[:10], *bad, *values[10:]], partitions=2)
    conf = {
        **conf_for(kafka_bootstrap, lines, counts),
        "sr3.kafka.bad.records": "dead-letter",
        "sr3.kafka.dead.letter.topic": dead,
    }

    report = run_spark(
        FILE, checkpoint_dir=tmp_path / "ck", spark=spark, ring=ring, conf=conf
    )

    assert report["idle"] is True
    expected = Counter(w for line in text for w in line.split())
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    assert {k[0]: v["n"] for k, v in state.items()} == dict(expected)
    assert sorted(read_all(kafka_bootstrap, dead, decode=False)) == sorted(bad)
    # the offsets carried on past the diverted records: 31 records a partition
    record = ring.committed("kafka_wordcount")
    assert record is not None
    assert record.offsets == {
        "lines/0": {f"{lines}:0": 31},
        "lines/1": {f"{lines}:1": 31},
    }


def test_spark_fails_on_an_invalid_record_naming_it(
    spark: SparkSession,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    tmp_path: Path,
) -> None:
    lines, counts = new_topic("lines", 1), new_topic("counts", 1)
    produce(kafka_bootstrap, lines, [b"a b", b"\xff\xfe", b"c"], partitions=1)
    conf = conf_for(kafka_bootstrap, lines, counts)

    with pytest.raises(QueryFailedError) as info:
        run_spark(FILE, checkpoint_dir=tmp_path / "ck", spark=spark, conf=conf)

    message = str(info.value)
    assert f"record at offset 1 of Kafka topic {lines} partition 0" in message
    assert "sr3.kafka.bad.records=dead-letter" in message
