"""Where a Spark run of a ``KafkaSpout`` topology starts, checked against a real broker.

What ``spark_bridge.kafka_start`` plans on the driver before a query starts,
for ``topologies/kafka_wordcount.py`` unchanged: partitions dealt as the Storm
spout deals them, offsets taken from the committed epoch, and an offset that
retention has deleted refused with the setting named (as the Storm spout
refuses it), before Spark reads anything.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from spark_bridge.kafka_start import kafka_starts
from storm_bridge.kafka import KafkaOffsetGoneError
from tests.integration.kafka.conftest import NewTopicFactory, produce, topology_file
from topology_api.topology import load_topology

pytestmark = [pytest.mark.kafka]

FILE = topology_file("kafka_wordcount.py")


def _conf(bootstrap: str, lines: str) -> dict[str, str]:
    return {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": f"{lines}-out",
    }


def test_spark_starts_each_partition_at_the_epochs_offset(
    kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    lines = new_topic("start-lines", 2)
    produce(kafka_bootstrap, lines, [f"l{i}".encode() for i in range(20)], partitions=2)
    topology = load_topology(FILE)
    offsets = {"lines/0": {f"{lines}:0": 4}, "lines/1": {f"{lines}:1": 7}}

    start = kafka_starts(topology, ("lines",), _conf(kafka_bootstrap, lines), offsets)

    assert start["lines"].positions() == {
        "lines/0": {f"{lines}:0": 4},
        "lines/1": {f"{lines}:1": 7},
    }


def test_spark_refuses_an_offset_deleted_by_retention_naming_the_setting(
    kafka_admin: AdminClient, kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    lines = new_topic("retained-lines", 1)
    produce(kafka_bootstrap, lines, [f"l{i}".encode() for i in range(20)], partitions=1)
    # what retention does to the head of the log: delete-records moves its start
    for future in kafka_admin.delete_records([TopicPartition(lines, 0, 12)]).values():
        future.result(30)
    topology = load_topology(FILE)
    offsets = {"lines/0": {f"{lines}:0": 5}}  # the last committed epoch's

    with pytest.raises(KafkaOffsetGoneError) as info:
        kafka_starts(topology, ("lines",), _conf(kafka_bootstrap, lines), offsets)

    message = str(info.value)
    assert f"offset 5 of Kafka topic {lines} partition 0" in message
    assert "starts at 12" in message
    assert "retention.ms" in message
