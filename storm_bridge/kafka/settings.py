"""Storm conf of the Kafka spout and sink, read into frozen settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sr3.errors import ConfigError

__all__ = [
    "AT_LEAST_ONCE",
    "BOOTSTRAP_KEY",
    "EXACTLY_ONCE",
    "KAFKA_KEYS",
    "SinkSettings",
    "SpoutSettings",
]

BOOTSTRAP_KEY: Final = "sr3.kafka.bootstrap"
EXACTLY_ONCE: Final = "exactly-once"
AT_LEAST_ONCE: Final = "at-least-once"
#: Every conf key the Kafka spout and sink read (``sr3 run -o`` accepts them).
KAFKA_KEYS: Final = frozenset(
    {
        BOOTSTRAP_KEY,
        "sr3.kafka.topics",
        "sr3.kafka.topic.pattern",
        "sr3.kafka.format",
        "sr3.kafka.start",
        "sr3.kafka.topic.wait.s",
        "sr3.kafka.bad.records",
        "sr3.kafka.dead.letter.topic",
        "sr3.kafka.batch.records",
        "sr3.kafka.poll.s",
        "sr3.kafka.sink.topic",
        "sr3.kafka.sink.guarantee",
        "sr3.kafka.sink.key.field",
        "sr3.kafka.sink.marker.topic",
        "sr3.kafka.sink.poll.s",
    }
)
_FORMATS: Final = ("text", "json")
_BAD: Final = ("fail", "dead-letter")
_STARTS: Final = ("earliest", "latest")
_GUARANTEES: Final = (EXACTLY_ONCE, AT_LEAST_ONCE)


def _choice(conf: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = str(conf.get(key) or choices[0])
    if value not in choices:
        msg = f"{key}={value!r} is invalid; use one of {', '.join(choices)}"
        raise ConfigError(msg)
    return value


def _number(conf: Mapping[str, Any], key: str, default: float, *, low: float) -> float:
    raw = conf.get(key, default)
    try:
        value = float(default if raw is None else raw)
    except (TypeError, ValueError) as exc:
        msg = f"{key}={raw!r} is not a number; use e.g. {default}"
        raise ConfigError(msg) from exc
    if value < low:
        msg = f"{key}={raw!r} must be >= {low}"
        raise ConfigError(msg)
    return value


def _bootstrap(conf: Mapping[str, Any]) -> str:
    bootstrap = str(conf.get(BOOTSTRAP_KEY) or "")
    if not bootstrap:
        msg = (
            f"{BOOTSTRAP_KEY} is not set: give the Kafka bootstrap address "
            "(host:port[,host:port]) in the topology's config or with "
            f"`sr3 run -o {BOOTSTRAP_KEY}=...` (`sr3 status --json` shows a "
            "lab broker's under kafka.bootstrap)"
        )
        raise ConfigError(msg)
    return bootstrap


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
        raw = conf.get("sr3.kafka.topics") or ()
        names = raw.split(",") if isinstance(raw, str) else list(raw)
        topics = tuple(str(t).strip() for t in names if str(t).strip())
        pattern = conf.get("sr3.kafka.topic.pattern") or None
        if bool(topics) == bool(pattern):
            msg = (
                "give the Kafka spout either sr3.kafka.topics (names) or "
                "sr3.kafka.topic.pattern (a regular expression), not both or none"
            )
            raise ConfigError(msg)
        if pattern is not None:
            try:
                re.compile(str(pattern))
            except re.error as exc:
                msg = f"sr3.kafka.topic.pattern={pattern!r} is invalid: {exc}"
                raise ConfigError(msg) from exc
        bad = _choice(conf, "sr3.kafka.bad.records", _BAD)
        dead = conf.get("sr3.kafka.dead.letter.topic") or None
        if bad == "dead-letter" and not dead:
            msg = "sr3.kafka.bad.records=dead-letter needs sr3.kafka.dead.letter.topic"
            raise ConfigError(msg)
        return cls(
            bootstrap=_bootstrap(conf),
            topics=topics,
            pattern=None if pattern is None else str(pattern),
            record_format=_choice(conf, "sr3.kafka.format", _FORMATS),
            start=_choice(conf, "sr3.kafka.start", _STARTS),
            topic_wait_s=_number(conf, "sr3.kafka.topic.wait.s", 0.0, low=0.0),
            bad_records=bad,
            dead_letter_topic=None if dead is None else str(dead),
            batch_records=int(_number(conf, "sr3.kafka.batch.records", 500, low=1)),
            poll_s=_number(conf, "sr3.kafka.poll.s", 0.05, low=0.0),
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
        topic = str(conf.get("sr3.kafka.sink.topic") or "")
        if not topic:
            msg = "sr3.kafka.sink.topic is not set: name the topic results go to"
            raise ConfigError(msg)
        key_field = conf.get("sr3.kafka.sink.key.field") or None
        return cls(
            bootstrap=_bootstrap(conf),
            topic=topic,
            guarantee=_choice(conf, "sr3.kafka.sink.guarantee", _GUARANTEES),
            key_field=None if key_field is None else str(key_field),
            marker_topic=str(
                conf.get("sr3.kafka.sink.marker.topic") or "_sr3_sink_commits"
            ),
            poll_s=_number(conf, "sr3.kafka.sink.poll.s", 0.05, low=0.001),
        )
