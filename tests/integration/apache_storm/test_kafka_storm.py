"""Kafka word count on real Apache Storm: exactly once through a worker and a node kill.

``topologies/kafka_wordcount.py`` goes to the session's Storm cluster with
``sr3 run --engine apache-storm``: its ``KafkaSpout`` tasks and ``KafkaSink``
tasks run as multilang subprocesses of a worker JVM (this virtualenv's
``streamparse_run``, so confluent-kafka is importable there). A worker JVM and
a ring node are SIGKILLed together while it runs; the committed counts must be
exact and the output topic, read ``read_committed``, must hold each
``(word, n)`` exactly once. A second test hands over from a Spark driver that
died before writing its last committed batch to Kafka. The Kafka broker is the
session's shared one (``tests/integration/kafka/conftest.py``), not a second
copy.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from sr3.config import Sr3Config
from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.lab import Lab
from storm_bridge.apache import ApacheStormCluster
from storm_bridge.sparse.submit import NimbusSession
from storm_bridge.wiring import RingAccess
from tests.integration.apache_storm.test_sparse_submit import sr3_run
from tests.integration.kafka.conftest import (
    create_topic,
    produce,
    session_broker,
    topology_file,
)
from tests.integration.kafka.test_spark_kafka_crash import (
    assert_each_output_once,
    crash_spark_after_commit,
)

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.zk,
    pytest.mark.apache_storm,
    pytest.mark.spark,
    pytest.mark.slow,
]

FILE = topology_file("kafka_wordcount.py")
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
LINES = 2000


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's one broker, shared with ``tests/integration/kafka/``."""
    broker, started = session_broker(tmp_path_factory)
    yield broker
    if started:
        broker.stop()


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def test_kafka_wordcount_on_storm_exactly_once_after_worker_and_node_kills(
    apache_storm: ApacheStormCluster,
    kafka_broker: KafkaBroker,
    lab: Lab,
    ring: RingAccess,
) -> None:
    bootstrap = kafka_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    suffix = random.Random().getrandbits(32)  # noqa: S311 (a topic name)
    lines = create_topic(admin, f"storm-lines-{suffix:x}", 2)
    counts = create_topic(admin, f"storm-counts-{suffix:x}", 2)
    rng = random.Random(20)  # noqa: S311 (test data)
    text = [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(LINES)]
    produce(bootstrap, lines, [t.encode() for t in text], partitions=2)
    options = {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
        # a few hundred lines per epoch: the kills land while the topic is read
        "sr3.kafka.batch.records": 20,
        "topology.max.spout.pending": 50,
        "topology.message.timeout.secs": 5,
        "sr3.checkpoint.interval.s": 0.5,
    }
    conf = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
    proc = sr3_run(
        [str(FILE), "--lab", str(lab.root), "--until-idle", "--json",
         "--timeout", "120", "--kill-worker", "0@1", "--kill-node", "node-2@1",
         *conf],
        apache_storm.nimbus,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["engine"] == "apache-storm" and report["idle"] is True
    assert report["checkpoints"]["rollbacks"] >= 1
    assert "kafka_wordcount" not in NimbusSession(apache_storm.nimbus).topologies()

    # exact counts, and the run wrote the final epoch once the topology was killed
    assert_each_output_once(ring, bootstrap, counts, text)


def test_real_storm_taking_over_from_a_crashed_spark_driver_writes_its_batch(
    apache_storm: ApacheStormCluster,
    kafka_broker: KafkaBroker,
    lab: Lab,
    ring: RingAccess,
    tmp_path: Path,
) -> None:
    """A Spark driver dies between an epoch's commit and its Kafka transaction;
    ``sr3 run --engine apache-storm --resume`` takes over and writes that batch."""
    bootstrap = kafka_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    suffix = random.Random().getrandbits(32)  # noqa: S311 (a topic name)
    lines = create_topic(admin, f"handoff-lines-{suffix:x}", 2)
    counts = create_topic(admin, f"handoff-counts-{suffix:x}", 2)
    text, conf = crash_spark_after_commit(
        lab, ring, bootstrap, (lines, counts), tmp_path
    )
    options = [arg for k, v in conf.items() for arg in ("-o", f"{k}={v}")]
    proc = sr3_run(
        [str(FILE), "--lab", str(lab.root), "--until-idle", "--json", "--resume",
         "--timeout", "120", *options],
        apache_storm.nimbus,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["engine"] == "apache-storm" and report["idle"] is True
    assert_each_output_once(ring, bootstrap, counts, text)
