"""Kafka fixtures: ONE real KRaft broker (fetched jars) shared by every Kafka test.

The broker comes from ``.cache/kafka-<version>`` (``scripts/fetch-jars.sh``); a
missing jar fails the session naming it, never skips. Tests get their own topics
(``new_topic``) and read outputs through :func:`read_all`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.daemons.kafka_home import KafkaBrokerError

NewTopicFactory = Callable[..., str]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the broker's log tail to the report of a failed Kafka test."""
    report = yield
    broker = getattr(item, "funcargs", {}).get("kafka_broker")
    if report.failed and isinstance(broker, KafkaBroker):
        report.sections.append(("Kafka broker log (tail)", broker.log_tail(40)))
    return report


#: The session's broker, once started: fixtures of other test directories
#: (``tests/integration/apache_storm/test_kafka_storm.py``) share it through
#: :func:`session_broker` instead of starting a second one.
_SESSION_BROKER: list[KafkaBroker] = []


def session_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[KafkaBroker, bool]:
    """Return the session's broker, started on first use, and whether this call did.

    The caller that started it stops it at session teardown.
    """
    if _SESSION_BROKER:
        return _SESSION_BROKER[0], False
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), heap="384m")
    try:
        broker.start()
    except KafkaBrokerError as exc:
        pytest.fail(f"the Kafka broker cannot start: {exc}")
    _SESSION_BROKER.append(broker)
    return broker, True


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Run one broker for the whole session; a missing jar fails, naming it."""
    broker, started = session_broker(tmp_path_factory)
    yield broker
    if started:
        broker.stop()
        _SESSION_BROKER.clear()


@pytest.fixture(scope="session")
def kafka_admin(kafka_broker: KafkaBroker) -> AdminClient:
    """An admin client of the shared broker."""
    return AdminClient({"bootstrap.servers": kafka_broker.bootstrap})


def create_topic(admin: AdminClient, name: str, partitions: int) -> str:
    """Create a topic and wait until its metadata shows every partition."""
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    for future in futures.values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topics = admin.list_topics(name, timeout=5).topics
        meta = topics.get(name)
        if meta is not None and meta.error is None:
            if len(meta.partitions) == partitions:
                return name
    pytest.fail(f"topic {name} not visible within 30 s")


@pytest.fixture
def new_topic(kafka_admin: AdminClient) -> NewTopicFactory:
    """Return ``new_topic(prefix, partitions=2)``: a fresh topic's name."""

    def make(prefix: str, partitions: int = 2) -> str:
        return create_topic(kafka_admin, f"{prefix}-{uuid.uuid4().hex[:8]}", partitions)

    return make


def produce(
    bootstrap: str, topic: str, values: list[bytes], *, partitions: int
) -> None:
    """Write ``values`` round-robin over ``partitions`` and wait for the acks."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def read_all(
    bootstrap: str,
    topic: str,
    *,
    committed: bool = True,
    decode: bool = True,
    timeout_s: float = 30.0,
) -> list[Any]:
    """Return every record value of ``topic`` up to its end (JSON-decoded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1]
            for tp in parts
        }
        consumer.assign(parts)
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    value = message.value()
                    out.append(json.loads(value or b"null") if decode else value)
            positions = consumer.position(
                [TopicPartition(topic, p) for p in meta.partitions]
            )
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return out
        pytest.fail(f"reading {topic} did not reach its end within {timeout_s} s")
    finally:
        consumer.close()


def assert_each_count_once(
    bootstrap: str, topic: str, expected: Mapping[str, int]
) -> None:
    """A word count's output ``topic`` (read ``read_committed``) holds every
    ``(word, n)`` of ``expected``'s counts exactly once, and nothing else."""
    pairs = Counter((r["word"], r["count"]) for r in read_all(bootstrap, topic))
    assert {p: n for p, n in pairs.items() if n > 1} == {}
    assert set(pairs) == {(w, n) for w, t in expected.items() for n in range(1, t + 1)}


@pytest.fixture
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """The shared broker's bootstrap address."""
    return kafka_broker.bootstrap


def topology_file(name: str) -> Path:
    """Return a topology file of the repository's ``topologies/``."""
    return Path(__file__).resolve().parents[3] / "topologies" / name
