"""``sr3 compare`` on a Kafka topology: each engine writes its own output topic.

``topologies/kafka_wordcount.py`` on the local cluster and on Spark, reading one
input topic of the session's broker: the Storm run writes ``counts-storm``, the
Spark run ``counts-spark``, and the verdict compares the records each wrote, key
by key, with the state.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sr3_cli.compare import CompareRequest, compare_engines
from sr3_cli.lab import Lab
from tests.integration.kafka.conftest import (  # noqa: F401 (fixtures)
    NewTopicFactory,
    kafka_admin,
    kafka_bootstrap,
    kafka_broker,
    new_topic,
    produce,
    topology_file,
)
from tests.integration.kafka.test_kafka_wordcount import corpus

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.spark, pytest.mark.slow]


def test_each_engine_writes_its_own_topic_and_the_records_are_compared(
    spark: SparkSession,
    lab: Lab,
    kafka_bootstrap: str,  # noqa: F811 (the fixture)
    new_topic: NewTopicFactory,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    lines = new_topic("lines", 2)
    text = corpus(300, seed=17)
    produce(kafka_bootstrap, lines, [t.encode() for t in text], partitions=2)
    request = CompareRequest(
        file=topology_file("kafka_wordcount.py"),
        engines=("storm", "spark"),
        conf={
            "sr3.kafka.bootstrap": kafka_bootstrap,
            "sr3.kafka.topics": lines,
            "sr3.idle.quiet.s": 3,
        },
        timeout_s=300.0,
    )

    results = compare_engines(request, lab, spark=spark, progress=lambda _: None)

    assert results["agree"] is True, results["differences"]
    expected = Counter(w for line in text for w in line.split())
    # each (word, n) once per engine, read back read_committed
    counts = {w: list(range(1, t + 1)) for w, t in expected.items()}
    for engine in ("storm", "spark"):
        written = results["runs"][engine]["kafka"]["results"]
        assert written["topic"] == f"counts-{engine}"
        assert written["records"] == sum(expected.values())
        rows = written["rows"]
        assert {r["word"] for recs in rows.values() for r in recs} == set(rows)
        assert {w: sorted(r["count"] for r in recs) for w, recs in rows.items()} == (
            counts
        )
    kinds = {(c["engine"], c["what"], c["component"]) for c in results["compared"]}
    assert ("spark", "kafka", "results") in kinds
