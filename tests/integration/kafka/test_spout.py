"""KafkaSpout on the real broker, driven directly (its multilang channel in memory).

Covers reading and seeking by our offsets, and every kind of bad input: a
missing topic (at once and after waiting), records not valid for the format
(fail or dead-letter), and offsets an epoch recorded that retention deleted.
"""

from __future__ import annotations

import io
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from storm_bridge.kafka import (
    KafkaOffsetGoneError,
    KafkaRecordError,
    KafkaSpout,
    KafkaTopicMissingError,
)
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    create_topic,
    produce,
    read_all,
)
from topology_api.barriers import LOCAL_CLUSTER_KEY, WAITING_METRIC

pytestmark = [pytest.mark.kafka]


class Words(KafkaSpout):
    outputs = ["word", "n"]


def context(index: int = 0, tasks: int = 1) -> dict[str, Any]:
    ids = {str(10 + i): "lines" for i in range(tasks)}
    return {"componentid": "lines", "taskid": 10 + index, "task->component": ids}


class Channel:
    """A spout with its multilang stdout in memory; returns what it emitted."""

    def __init__(self, spout: KafkaSpout) -> None:
        self.spout = spout
        self.out = spout.serializer.output_stream = io.StringIO()

    def emitted(self) -> list[dict[str, Any]]:
        lines = self.out.getvalue().split("\nend\n")
        return [json.loads(x) for x in lines if x.strip()]

    def drain(self, want: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.emitted()) < want and time.monotonic() < deadline:
            self.spout.next_tuple()
        return self.emitted()


def spout(
    cls: type[KafkaSpout], conf: dict[str, Any], index: int = 0, tasks: int = 1
) -> Channel:
    instance = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    instance.initialize(conf, context(index, tasks))
    return Channel(instance)


@pytest.fixture
def conf(kafka_bootstrap: str) -> dict[str, Any]:
    return {"sr3.kafka.bootstrap": kafka_bootstrap, "sr3.kafka.poll.s": 0.1}


@pytest.fixture
def closing() -> Iterator[list[Channel]]:
    opened: list[Channel] = []
    yield opened
    for channel in opened:
        channel.spout.seek(None)  # closes the consumer


def test_tasks_split_partitions_and_seek_replays_from_our_offsets(
    conf: dict[str, Any], kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    topic = new_topic("lines", 3)
    produce(kafka_bootstrap, topic, [f"l{i}".encode() for i in range(30)], partitions=3)
    conf = {**conf, "sr3.kafka.topics": topic}
    first, second = spout(KafkaSpout, conf, 0, 2), spout(KafkaSpout, conf, 1, 2)
    for channel in (first, second):
        channel.spout.seek(None)
    a, b = first.drain(20), second.drain(10)
    assert len(a) == 20 and len(b) == 10  # partitions 0, 2 and 1 of 3
    assert {m["tuple"][0] for m in a + b} == {f"l{i}" for i in range(30)}
    # task 0 read partitions 0 and 2; an epoch recorded these positions
    offsets = {f"{topic}:0": 3, f"{topic}:2": 2}
    first.out.truncate(0)
    first.out.seek(0)
    first.spout.seek(offsets)
    replay = first.drain(20 - 5)
    assert len(replay) == 15
    assert [m["tuple"][0] for m in replay if m["tuple"][0] in {"l9", "l0"}] == ["l9"]


def test_a_missing_topic_fails_naming_it_and_how_to_create_it(
    conf: dict[str, Any],
) -> None:
    channel = spout(KafkaSpout, {**conf, "sr3.kafka.topics": "no-such-topic"})
    channel.spout.seek(None)
    with pytest.raises(KafkaTopicMissingError) as info:
        channel.spout.next_tuple()
    message = str(info.value)
    assert "no-such-topic" in message
    assert "--create --topic no-such-topic" in message
    assert "sr3.kafka.topic.wait.s" in message


def test_a_missing_topic_is_waited_for_as_configured(
    conf: dict[str, Any], kafka_admin: AdminClient, kafka_bootstrap: str
) -> None:
    name = f"late-{time.monotonic_ns()}"
    channel = spout(
        KafkaSpout, {**conf, "sr3.kafka.topics": name, "sr3.kafka.topic.wait.s": 60}
    )
    channel.spout.seek(None)
    channel.spout.next_tuple()  # waits: no error, nothing emitted
    assert channel.emitted() == []
    create_topic(kafka_admin, name, 1)
    produce(kafka_bootstrap, name, [b"hello"], partitions=1)
    assert [m["tuple"] for m in channel.drain(1)] == [["hello"]]


def test_an_invalid_record_fails_the_task_naming_it(
    conf: dict[str, Any], kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    topic = new_topic("json", 1)
    produce(
        kafka_bootstrap,
        topic,
        [b'{"word": "a", "n": 1}', b"not json", b'{"word": "b", "n": 2}'],
        partitions=1,
    )
    channel = spout(
        Words, {**conf, "sr3.kafka.topics": topic, "sr3.kafka.format": "json"}
    )
    channel.spout.seek(None)
    with pytest.raises(KafkaRecordError) as info:
        channel.drain(3)
    message = str(info.value)
    assert f"offset 1 of Kafka topic {topic} partition 0" in message
    assert "sr3.kafka.bad.records=dead-letter" in message
    assert [m["tuple"] for m in channel.emitted()] == [["a", 1]]


def test_invalid_records_go_to_the_dead_letter_topic(
    conf: dict[str, Any], kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    topic, dead = new_topic("json", 1), new_topic("dead", 1)
    produce(
        kafka_bootstrap,
        topic,
        [
            b'{"word": "a", "n": 1}',
            b"\xff\xfe",
            b'{"word": "b"}',
            b'{"word": "c", "n": 3}',
        ],
        partitions=1,
    )
    channel = spout(
        Words,
        {
            **conf,
            "sr3.kafka.topics": topic,
            "sr3.kafka.format": "json",
            "sr3.kafka.bad.records": "dead-letter",
            "sr3.kafka.dead.letter.topic": dead,
        },
    )
    channel.spout.seek(None)
    emitted = channel.drain(2)
    assert [m["tuple"] for m in emitted] == [["a", 1], ["c", 3]]
    # the offsets carried on past the diverted records
    assert read_all(kafka_bootstrap, dead, committed=True, decode=False) == [
        b"\xff\xfe",
        b'{"word": "b"}',
    ]


def test_an_offset_deleted_by_retention_fails_naming_the_setting(
    conf: dict[str, Any],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
) -> None:
    topic = new_topic("retained", 1)
    produce(kafka_bootstrap, topic, [f"l{i}".encode() for i in range(20)], partitions=1)
    # what retention does to the head of the log: delete-records moves its start
    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 12)])
    for future in futures.values():
        future.result(30)
    channel = spout(KafkaSpout, {**conf, "sr3.kafka.topics": topic})
    channel.spout.seek({f"{topic}:0": 5})  # an epoch recorded offset 5
    with pytest.raises(KafkaOffsetGoneError) as info:
        channel.spout.next_tuple()
    message = str(info.value)
    assert f"offset 5 of Kafka topic {topic} partition 0" in message
    assert "starts at 12" in message
    assert "retention.ms" in message


def local_spout(conf: dict[str, Any]) -> Channel:
    """A spout as the local cluster starts it: its handshake conf marks the cluster."""
    instance = KafkaSpout(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    full = {**conf, "topology.name": "t", LOCAL_CLUSTER_KEY: True}
    instance._setup_component(full, context())  # noqa: SLF001 - pystorm's handshake step
    instance.initialize(full, context())
    return Channel(instance)


def waiting_reasons(channel: Channel) -> list[Any]:
    return [
        m["params"]["reason"]
        for m in channel.emitted()
        if m.get("command") == "metrics" and m.get("name") == WAITING_METRIC
    ]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_spout_waits_while_kafka_is_unreachable_and_is_dry_at_its_end(
    conf: dict[str, Any],
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    closing: list[Channel],
) -> None:
    # --until-idle must tell a broker outage from the end of the input: both
    # read nothing, only the first is a wait
    address = f"127.0.0.1:{closed_port()}"
    down = local_spout(
        {**conf, "sr3.kafka.bootstrap": address, "sr3.kafka.topics": "t"}
    )
    closing.append(down)
    down.spout.seek(None)
    down.spout.next_tuple()
    reasons = waiting_reasons(down)
    assert len(reasons) == 1
    assert f"Kafka at {address} unreachable" in reasons[0]

    topic = new_topic("lines", 1)
    produce(kafka_bootstrap, topic, [b"a", b"b"], partitions=1)
    up = local_spout({**conf, "sr3.kafka.topics": topic})
    closing.append(up)
    up.spout.seek(None)
    assert [m["tuple"] for m in up.drain(2)] == [["a"], ["b"]]
    deadline = time.monotonic() + 3.0  # dry long enough for metadata probes
    while time.monotonic() < deadline:
        up.spout.next_tuple()
    assert waiting_reasons(up) == []  # reachable and at its end: dry, not waiting
