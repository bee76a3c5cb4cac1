"""Errors of the Kafka spout and sink; each names the topic or setting and the fix."""

from __future__ import annotations

from typing import Final

from topology_api.errors import TopologyApiError

__all__ = [
    "E_OFFSET_GONE",
    "E_TOPIC_MISSING",
    "KafkaBridgeError",
    "KafkaOffsetGoneError",
    "KafkaRecordError",
    "KafkaTopicMissingError",
]

E_TOPIC_MISSING: Final = (
    "Kafka topic {topics} does not exist on {bootstrap} (waited {waited_s:.1f} s, "
    "sr3.kafka.topic.wait.s={wait_s}). Create it, e.g. `kafka-topics.sh "
    "--bootstrap-server {bootstrap} --create --topic {first} --partitions N` "
    "(a lab's broker: `sr3 lab topic {first} --partitions N`), or raise "
    "sr3.kafka.topic.wait.s to wait for it"
)
E_OFFSET_GONE: Final = (
    "spout {spout}: the last committed epoch recorded offset {offset} of Kafka "
    "topic {topic} partition {partition}, but the log now starts at {start}: the "
    "broker deleted records the topology has not read (topic setting retention.ms "
    "or retention.bytes, or a delete-records call). The records in between are "
    "lost; keep retention.ms well above the time a topology may stay down, then "
    "either start the topology without resuming (sr3 run without --resume) or "
    "reset the committed epoch"
)


class KafkaBridgeError(TopologyApiError):
    """Root of the Kafka spout's and sink's errors."""


class KafkaTopicMissingError(KafkaBridgeError, LookupError):
    """A topic the spout reads does not exist (after ``sr3.kafka.topic.wait.s``)."""


class KafkaOffsetGoneError(KafkaBridgeError):
    """An offset an epoch recorded is below the partition's log start (retention)."""


class KafkaRecordError(KafkaBridgeError, ValueError):
    """A record is not valid for the declared ``sr3.kafka.format``."""
