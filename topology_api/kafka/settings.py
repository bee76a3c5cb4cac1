"""Storm conf of the Kafka spout and sink, read into frozen settings.

Each key's name, default and check are its row of :data:`sr3.config.KEYS`
(read through :class:`sr3.config.KafkaConfig`); the rules between keys are here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sr3.config import KEYS, KafkaConfig
from sr3.errors import ConfigError

__all__ = [
    "AT_LEAST_ONCE",
    "BOOTSTRAP_KEY",
    "EXACTLY_ONCE",
    "KAFKA_KEYS",
    "SinkSettings",
    "SpoutSettings",
    "partition_key",
]

BOOTSTRAP_KEY: Final = "sr3.kafka.bootstrap"
EXACTLY_ONCE: Final = "exactly-once"
AT_LEAST_ONCE: Final = "at-least-once"
#: Every conf key the Kafka spout and sink read (``sr3 run -o`` accepts them):
#: the ``kafka`` section of :data:`sr3.config.KEYS`, with their defaults.
KAFKA_KEYS: Final = frozenset(k.name for k in KEYS.values() if k.section == "kafka")


def partition_key(topic: str, partition: int) -> str:
    """Return the offset key of a partition, ``"topic:partition"``.

    Kafka topic names use only ``[a-zA-Z0-9._-]``, so the colon is unambiguous.
    """
    return f"{topic}:{partition}"


def _bootstrap(kafka: KafkaConfig) -> str:
    if not kafka.bootstrap:
        msg = (
            f"{BOOTSTRAP_KEY} is not set: give the Kafka bootstrap address "
            "(host:port[,host:port]) in the topology's config or with "
            f"`sr3 run -o {BOOTSTRAP_KEY}=...` (`sr3 status --json` shows a "
            "lab broker's under kafka.bootstrap)"
        )
        raise ConfigError(msg)
    return kafka.bootstrap


@dataclass(frozen=True)
class SpoutSettings:
    """How a :class:`~storm_bridge.kafka.KafkaSpout` reads.

    Attributes:
        bootstrap: ``sr3.kafka.bootstrap``, the brokers (required).
        topics: ``sr3.kafka.topics``: a list or comma-separated names.
        pattern: ``sr3.kafka.topic.pattern``: a regular expression matched
            against whole topic names (instead of ``topics``), resolved when
            the spout starts or rewinds.
        record_format: ``sr3.kafka.format``: ``text`` (default; one field, the
            UTF-8 value) or ``json`` (an object; the spout's output fields are
            read from it by name).
        start: ``sr3.kafka.start``: where a partition without a recorded offset
            starts, ``earliest`` (default) or ``latest``.
        topic_wait_s: ``sr3.kafka.topic.wait.s``: how long to wait for a missing
            topic before failing (default 0: fail at once, naming the topic).
        bad_records: ``sr3.kafka.bad.records``: ``fail`` (default; the task
            fails naming the record) or ``dead-letter``.
        dead_letter_topic: ``sr3.kafka.dead.letter.topic`` (needed by
            ``dead-letter``): where invalid records go, with headers naming the
            source and the error.
        batch_records: ``sr3.kafka.batch.records``: records one ``next_tuple``
            emits at most (default 500).
        poll_s: ``sr3.kafka.poll.s``: how long ``next_tuple`` waits for records
            (default 0.05).

    Raises:
        ConfigError: a value is missing or invalid.
    """

    bootstrap: str
    topics: tuple[str, ...]
    pattern: str | None
    record_format: str
    start: str
    topic_wait_s: float
    bad_records: str
    dead_letter_topic: str | None
    batch_records: int
    poll_s: float

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> SpoutSettings:
        """Read the ``sr3.kafka.*`` keys of a task's Storm conf.

        Raises:
            ConfigError: a value is missing or invalid.
        """
        kafka = KafkaConfig.from_mapping(conf)
        if bool(kafka.topics) == bool(kafka.topic_pattern):
            msg = (
                "give the Kafka spout either sr3.kafka.topics (names) or "
                "sr3.kafka.topic.pattern (a regular expression), not both or none"
            )
            raise ConfigError(msg)
        if kafka.bad_records == "dead-letter" and not kafka.dead_letter_topic:
            msg = "sr3.kafka.bad.records=dead-letter needs sr3.kafka.dead.letter.topic"
            raise ConfigError(msg)
        return cls(
            bootstrap=_bootstrap(kafka),
            topics=kafka.topics,
            pattern=kafka.topic_pattern,
            record_format=kafka.record_format,
            start=kafka.start,
            topic_wait_s=kafka.topic_wait_s,
            bad_records=kafka.bad_records,
            dead_letter_topic=kafka.dead_letter_topic,
            batch_records=kafka.batch_records,
            poll_s=kafka.poll_s,
        )


@dataclass(frozen=True)
class SinkSettings:
    """How a :class:`~storm_bridge.kafka.KafkaSink` writes.

    Attributes:
        bootstrap: ``sr3.kafka.bootstrap``, the brokers (required).
        topic: ``sr3.kafka.sink.topic``, where results go (required).
        guarantee: ``sr3.kafka.sink.guarantee``: ``exactly-once`` (default; one
            Kafka transaction per committed epoch, with its marker) or
            ``at-least-once`` (same path, no transaction: a crash between a
            write and its marker writes that epoch again).
        key_field: ``sr3.kafka.sink.key.field``: the input field whose value is
            the record key (default: none, records are unkeyed).
        marker_topic: ``sr3.kafka.sink.marker.topic``: the compacted topic that
            records the last epoch each sink task delivered (default
            ``_sr3_sink_commits``; created when missing).
        poll_s: ``sr3.kafka.sink.poll.s``: how often the committed epoch is
            read from ZooKeeper (default 0.05).

    Raises:
        ConfigError: a value is missing or invalid.
    """

    bootstrap: str
    topic: str
    guarantee: str
    key_field: str | None
    marker_topic: str
    poll_s: float

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> SinkSettings:
        """Read the ``sr3.kafka.*`` keys of a task's Storm conf.

        Raises:
            ConfigError: a value is missing or invalid.
        """
        kafka = KafkaConfig.from_mapping(conf)
        if not kafka.sink_topic:
            msg = "sr3.kafka.sink.topic is not set: name the topic results go to"
            raise ConfigError(msg)
        return cls(
            bootstrap=_bootstrap(kafka),
            topic=kafka.sink_topic,
            guarantee=kafka.sink_guarantee,
            key_field=kafka.sink_key_field,
            marker_topic=kafka.sink_marker_topic,
            poll_s=kafka.sink_poll_s,
        )
