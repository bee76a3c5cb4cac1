"""Kafka as a source and sink of streamparse topologies (confluent-kafka).

:class:`KafkaSpout` reads partitions from offsets recorded in our epochs;
:class:`KafkaSink` writes outputs exactly once, when their epoch commits.
The errors and settings import without confluent-kafka; the ``sr3.kafka.*``
keys (:data:`~topology_api.kafka.settings.KAFKA_KEYS`) are rows of
:data:`sr3.config.KEYS`, which ``sr3 run -o`` checks. The spout and sink load
confluent-kafka on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sr3.exports import lazy_exports
from topology_api.kafka.errors import (
    KafkaBridgeError,
    KafkaOffsetGoneError,
    KafkaRecordError,
    KafkaTopicMissingError,
)
from topology_api.kafka.settings import (
    KAFKA_KEYS,
    SinkSettings,
    SpoutSettings,
    partition_key,
)

if TYPE_CHECKING:
    from storm_bridge.kafka.sink import KafkaSink, deliver_committed
    from storm_bridge.kafka.spout import KafkaSpout
    from topology_api.kafka.writers import transactional_id

__all__ = [
    "KAFKA_KEYS",
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

#: Exports imported on first use: they load confluent-kafka.
_LAZY = {
    "KafkaSink": "storm_bridge.kafka.sink",
    "deliver_committed": "storm_bridge.kafka.sink",
    "transactional_id": "topology_api.kafka.writers",
    "KafkaSpout": "storm_bridge.kafka.spout",
}


__getattr__ = lazy_exports(__name__, _LAZY)
