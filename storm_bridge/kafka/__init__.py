"""Kafka as a source and sink of streamparse topologies (confluent-kafka).

:class:`KafkaSpout` reads partitions from offsets recorded in our epochs;
:class:`KafkaSink` writes outputs exactly once, when their epoch commits.
"""

from storm_bridge.kafka.errors import (
    KafkaBridgeError,
    KafkaOffsetGoneError,
    KafkaRecordError,
    KafkaTopicMissingError,
)
from storm_bridge.kafka.settings import SinkSettings, SpoutSettings
from storm_bridge.kafka.sink import KafkaSink, deliver_committed, transactional_id
from storm_bridge.kafka.spout import KafkaSpout, partition_key

__all__ = [
    "KafkaBridgeError",
    "KafkaOffsetGoneError",
    "KafkaRecordError",
    "KafkaSink",
    "KafkaSpout",
    "KafkaTopicMissingError",
    "SinkSettings",
    "SpoutSettings",
    "deliver_committed",
    "partition_key",
    "transactional_id",
]
