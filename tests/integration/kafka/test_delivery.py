"""EpochDelivery on the real broker: one transaction per epoch, markers, fencing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from storm_bridge.kafka import SinkSettings
from tests.integration.kafka.conftest import NewTopicFactory, read_all
from topology_api.kafka.delivery import EpochDelivery, Marker, Snapshot

pytestmark = [pytest.mark.kafka]


def outputs(seqs: range) -> list[tuple[int, dict[str, Any]]]:
    return [(s, {"k": None, "v": f'{{"n": {s}}}'.encode()}) for s in seqs]


def delivery(settings: SinkSettings, tid: str) -> EpochDelivery:
    return EpochDelivery(settings=settings, owner="t/results/0", transactional_id=tid)


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_epochs_are_written_once_across_restarts(
    kafka_bootstrap: str, new_topic: NewTopicFactory, guarantee: str
) -> None:
    settings = SinkSettings.from_conf(
        {
            "sr3.kafka.bootstrap": kafka_bootstrap,
            "sr3.kafka.sink.topic": new_topic("out", 1),
            "sr3.kafka.sink.guarantee": guarantee,
            "sr3.kafka.sink.marker.topic": new_topic("markers", 1),
        }
    )
    tid = f"sr3-test-{uuid.uuid4().hex[:8]}"
    first = delivery(settings, tid)
    assert first.deliver(5, Snapshot("run-a", outputs(range(3)))) == Marker(
        5, "run-a", 2
    )
    # the next epoch's snapshot still holds outputs 0..2 (trimmed later)
    assert first.deliver(6, Snapshot("run-a", outputs(range(5)))) == Marker(
        6, "run-a", 4
    )
    first.close()
    # a restarted task restores epoch 6 again: nothing is written twice
    again = delivery(settings, tid)
    assert again.deliver(6, Snapshot("run-a", outputs(range(5)))).seq == 4
    # a fresh run numbers from 0 again: its marker differs, so all is written
    assert again.deliver(9, Snapshot("run-b", outputs(range(2)))) == Marker(
        9, "run-b", 1
    )
    again.close()
    values = read_all(kafka_bootstrap, settings.topic)
    assert values == [{"n": n} for n in (0, 1, 2, 3, 4, 0, 1)]


def test_a_fenced_producers_open_transaction_stays_invisible(
    kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    out = new_topic("out", 1)
    settings = SinkSettings.from_conf(
        {
            "sr3.kafka.bootstrap": kafka_bootstrap,
            "sr3.kafka.sink.topic": out,
            "sr3.kafka.sink.marker.topic": new_topic("markers", 1),
        }
    )
    tid = f"sr3-test-{uuid.uuid4().hex[:8]}"
    # a task that died inside its transaction: records written, never committed
    zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": tid})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(out, value=b'{"n": -1}')
    assert zombie.flush(30) == 0
    restarted = delivery(settings, tid)  # init_transactions fences and aborts it
    restarted.deliver(3, Snapshot("run", outputs(range(2))))
    restarted.close()
    assert read_all(kafka_bootstrap, out) == [{"n": 0}, {"n": 1}]
    assert {"n": -1} in read_all(kafka_bootstrap, out, committed=False)
