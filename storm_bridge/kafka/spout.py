"""``KafkaSpout``: a replayable spout reading Kafka partitions from our epochs' offsets.

Partitions of the configured topics (or pattern) are sorted by (topic,
partition) and dealt to the spout's tasks round-robin by task index, so the
assignment is deterministic and needs no consumer group. The offset each emit
carries is ``{"topic:partition": next offset}`` over the task's partitions: an
epoch records it, and a rollback or restart ``seek``s back to it. Kafka's
consumer-group offsets are never used or committed.

The consumer is assigned lazily from ``next_tuple``: a broker that is down
(at start or later) only makes ``next_tuple`` emit nothing until it is back,
so the task keeps answering Storm. While it is down (or a topic is missing)
the spout says it waits for its source
(:meth:`~storm_bridge.replayable.ReplayableSpout.waiting_for_source`), so
``sr3 run --until-idle`` does not take the outage for the end of the input: a
dry spout asks the broker for metadata once a second
(``_PROBE_EVERY_S``) to tell the two apart. Records that are not valid for
``sr3.kafka.format`` fail the task naming the record, or go to a dead-letter
topic (``sr3.kafka.bad.records``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from storm_bridge.replayable import ReplayableSpout
from topology_api.barriers import task_index
from topology_api.kafka.errors import (
    E_OFFSET_GONE,
    E_TOPIC_MISSING,
    KafkaOffsetGoneError,
    KafkaRecordError,
    KafkaTopicMissingError,
)
from topology_api.kafka.settings import SpoutSettings, partition_key

__all__ = ["KafkaSpout"]

logger = logging.getLogger(__name__)

#: Seconds between two "broker unreachable" warnings of one task.
_WARN_EVERY_S: Final = 10.0
_METADATA_TIMEOUT_S: Final = 2.0
#: Seconds between two metadata probes of a spout that reads nothing.
_PROBE_EVERY_S: Final = 1.0
#: Consumer errors that mean the broker is away (not only a slow fetch).
_AWAY: Final = frozenset(
    {
        KafkaError._TRANSPORT,  # noqa: SLF001 (librdkafka's public error codes)
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001 (librdkafka's public error codes)
    }
)
#: Consumer errors that only mean "the broker is away for now": librdkafka retries.
_TRANSIENT: Final = frozenset(
    {
        KafkaError._TRANSPORT,  # noqa: SLF001 (librdkafka's public error codes)
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001 (librdkafka's public error codes)
        KafkaError._TIMED_OUT,  # noqa: SLF001 (librdkafka's public error codes)
        KafkaError._PARTITION_EOF,  # noqa: SLF001 (librdkafka's public error codes)
    }
)


class KafkaSpout(ReplayableSpout):
    """Emit the records of Kafka topics, replayable from offsets in our epochs.

    Storm conf (topology or component): ``sr3.kafka.bootstrap``,
    ``sr3.kafka.topics`` or ``sr3.kafka.topic.pattern``, and the optional keys
    of :class:`~topology_api.kafka.settings.SpoutSettings`. With the ``text``
    format a tuple is ``[value]``; with ``json`` it is the JSON object's values
    for the spout's output fields. Subclass it to set ``outputs`` or override
    :meth:`decode`.
    """

    outputs = ["value"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        """Read the settings; the consumer connects on the first ``next_tuple``."""
        self._settings = SpoutSettings.from_conf(stormconf)
        self._index, self._count = task_index(context)
        self._name = f"{context['componentid']}/{self._index}"
        self._consumer: Consumer | None = None
        self._dead_letter: Producer | None = None
        #: Positions to start from (what :meth:`seek` was given).
        self._sought: dict[str, int] = {}
        #: Next offset per assigned partition; None until assigned.
        self._positions: dict[str, int] | None = None
        self._waiting_since: float | None = None
        self._warned_at = 0.0
        self._probed_at = 0.0
        #: (topic, partition) this task reads, once assigned.
        self._assigned: list[tuple[str, int]] = []
        self.emitted = 0

    # -- replay ------------------------------------------------------------------------

    def seek(self, offset: Any) -> None:
        """Start over from ``offset`` (the last committed epoch's; None: the start).

        The consumer is (re)assigned on the next ``next_tuple``; records fetched
        before are dropped.
        """
        self._sought = {str(k): int(v) for k, v in dict(offset or {}).items()}
        self._positions = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def next_tuple(self) -> None:
        """Emit up to ``sr3.kafka.batch.records`` records (none while waiting)."""
        if self._positions is None and not self._assign():
            return
        consumer = self._consumer
        positions = self._positions
        if consumer is None or positions is None:
            return
        settings = self._settings
        heard = False
        for message in consumer.consume(settings.batch_records, settings.poll_s):
            error = message.error()
            if error is not None:
                self._consumer_error(error, message)
                continue
            heard = True
            topic, partition = message.topic(), message.partition()
            if topic is None or partition is None:
                continue
            offset = message.offset()
            if offset is None:
                continue
            values = self._values(message)
            positions[partition_key(topic, partition)] = offset + 1
            if values is None:
                continue
            # sorted: equal positions give an equal offset (and repr, which
            # native mode's poison-tuple count keys on) whatever the read order
            self.emit(values, offset=dict(sorted(positions.items())))
            self.emitted += 1
        if heard:
            self.waiting_for_source(None)
        else:
            self._probe(consumer)

    def _probe(self, consumer: Consumer) -> None:
        """Read nothing: ask the broker for metadata (at most once a second).

        Whether it answers tells a broker that is away (waiting) from one with
        no new records (the spout may be dry).
        """
        now = time.monotonic()
        if now - self._probed_at < _PROBE_EVERY_S:
            return
        self._probed_at = now
        if not self._assigned:  # more tasks than partitions: nothing to wait for
            self.waiting_for_source(None)
            return
        topics = sorted({t for t, _p in self._assigned})
        try:
            metadata = consumer.list_topics(
                topic=topics[0] if len(topics) == 1 else None,
                timeout=_METADATA_TIMEOUT_S,
            )
        except KafkaException as exc:
            self._away(exc)
            return
        for topic, partition in self._assigned:
            meta = metadata.topics.get(topic)
            found = None if meta is None else meta.partitions.get(partition)
            if found is None or found.leader < 0:
                # a dead leader's partitions until another broker takes them
                self.waiting_for_source(
                    f"Kafka partition {partition_key(topic, partition)} has no "
                    f"leader at {self._settings.bootstrap}"
                )
                return
        self.waiting_for_source(None)

    def _away(self, why: object) -> None:
        bootstrap = self._settings.bootstrap
        self._warn("Kafka at %s unreachable (%s); waiting", bootstrap, why)
        self.waiting_for_source(f"Kafka at {bootstrap} unreachable ({why})")

    def decode(self, value: bytes | None) -> list[Any]:
        """Return a record value as the tuple's values (per ``sr3.kafka.format``).

        Raises:
            ValueError: the value is not valid for the format.
        """
        if value is None:
            msg = "the record has no value (a tombstone)"
            raise ValueError(msg)
        text = value.decode("utf-8")
        if self._settings.record_format == "text":
            return [text]
        obj = json.loads(text)
        if not isinstance(obj, dict):
            msg = f"a JSON {type(obj).__name__}, not an object"
            raise ValueError(msg)
        fields = [str(f) for f in self.outputs]
        missing = [f for f in fields if f not in obj]
        if missing:
            msg = f"the JSON object lacks the output fields {missing}"
            raise ValueError(msg)
        return [obj[f] for f in fields]

    # -- internals ---------------------------------------------------------------------

    def _values(self, message: Message) -> list[Any] | None:
        return self.record_values(
            message.value(),
            key=message.key(),
            topic=str(message.topic()),
            partition=int(message.partition() or 0),
            offset=int(message.offset() or 0),
        )

    def record_values(
        self,
        value: bytes | None,
        *,
        key: bytes | None,
        topic: str,
        partition: int,
        offset: int,
    ) -> list[Any] | None:
        """Return a record's tuple values, or None when it was dead-lettered.

        The one bad-record policy (``sr3.kafka.bad.records``) of both engines: the
        Spark engine's Kafka source calls it on its executors too.

        Raises:
            KafkaRecordError: the record is invalid and the policy is ``fail``, or
                the dead-letter topic could not be written.
        """
        try:
            return self.decode(value)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
            where = (
                f"record at offset {offset} of Kafka topic {topic} "
                f"partition {partition}"
            )
            if self._settings.bad_records == "fail":
                msg = (
                    f"spout {self._name}: {where} is not valid "
                    f"sr3.kafka.format={self._settings.record_format}: {exc}. Fix the "
                    "producer, or set sr3.kafka.bad.records=dead-letter and "
                    "sr3.kafka.dead.letter.topic to divert such records"
                )
                raise KafkaRecordError(msg) from exc
            headers: list[tuple[str, str | bytes | None]] = [
                ("sr3.source.topic", topic.encode()),
                ("sr3.source.partition", str(partition).encode()),
                ("sr3.source.offset", str(offset).encode()),
                ("sr3.error", f"{where}: {exc}".encode("utf-8", "replace")),
            ]
            self._divert(value, key, headers, f"{where}: {exc}")
            return None

    def _divert(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        reason: str,
    ) -> None:
        """Write a bad record to the dead-letter topic, synchronously (rare)."""
        topic = self._settings.dead_letter_topic
        if topic is None:
            return
        if self._dead_letter is None:
            self._dead_letter = Producer(
                {
                    "bootstrap.servers": self._settings.bootstrap,
                    "enable.idempotence": True,
                    "logger": logger,
                }
            )
        self._dead_letter.produce(topic, value=value, key=key, headers=headers)
        remaining = self._dead_letter.flush(30.0)
        if remaining:
            msg = (
                f"spout {self._name}: could not write a bad record to dead-letter "
                f"topic {topic} within 30 s; check that it exists on "
                f"{self._settings.bootstrap}"
            )
            raise KafkaRecordError(msg)
        logger.warning("spout %s: dead-lettered %s", self._name, reason)

    def _consumer_error(self, error: KafkaError, message: Message) -> None:
        code = error.code()
        if code == KafkaError._AUTO_OFFSET_RESET:  # noqa: SLF001 (public code)
            # an offset vanished after the assignment was checked (retention ran)
            topic, partition = message.topic() or "?", message.partition() or 0
            start = self._log_start(topic, partition)
            key = partition_key(topic, partition)
            wanted = (self._positions or {}).get(key)
            raise KafkaOffsetGoneError(
                E_OFFSET_GONE.format(
                    spout=self._name,
                    offset=wanted,
                    topic=topic,
                    partition=partition,
                    start=start,
                )
            )
        if code in _AWAY:
            self._away(error)
            return
        if code in _TRANSIENT or error.retriable():
            self._warn("Kafka consumer: %s (retrying)", error)
            return
        raise KafkaException(error)

    def _warn(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            logger.warning("spout %s: " + fmt, self._name, *args)

    def _new_consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self._settings.bootstrap,
                # assign() only: no subscription, no commits, no group offsets
                "group.id": f"sr3-unused-{self._name}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # an offset below the log start is an error, never a silent jump
                "auto.offset.reset": "error",
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
                "logger": logger,
            }
        )

    def _assign(self) -> bool:
        """Assign this task's partitions at the sought positions; False: not yet."""
        if self._consumer is None:
            self._consumer = self._new_consumer()
        consumer = self._consumer
        try:
            metadata = consumer.list_topics(timeout=_METADATA_TIMEOUT_S)
        except KafkaException as exc:
            self._away(exc)
            return False
        topics = self._topics(metadata.topics)
        if topics is None:
            return False
        partitions = sorted(
            (t, p) for t in topics for p in metadata.topics[t].partitions
        )
        mine = partitions[self._index :: self._count]
        assignment: list[TopicPartition] = []
        positions: dict[str, int] = {}
        for topic, partition in mine:
            key = partition_key(topic, partition)
            wanted = self._sought.get(key)
            if wanted is None:
                start = (
                    OFFSET_BEGINNING
                    if self._settings.start == "earliest"
                    else OFFSET_END
                )
                assignment.append(TopicPartition(topic, partition, start))
                continue
            low = self._log_start(topic, partition)
            if low is None:
                return False
            if wanted < low:
                raise KafkaOffsetGoneError(
                    E_OFFSET_GONE.format(
                        spout=self._name,
                        offset=wanted,
                        topic=topic,
                        partition=partition,
                        start=low,
                    )
                )
            positions[key] = wanted
            assignment.append(TopicPartition(topic, partition, wanted))
        consumer.assign(assignment)
        self._positions = positions
        self._assigned = list(mine)
        self.waiting_for_source(None)
        logger.info(
            "spout %s reads %s from %s",
            self._name,
            [partition_key(t, p) for t, p in mine],
            positions or self._settings.start,
        )
        return True

    def _topics(self, existing: dict[str, Any]) -> list[str] | None:
        """Return the topics to read, or None to wait; raise once waited enough."""
        settings = self._settings
        ok = {t for t, meta in existing.items() if meta.error is None}
        if settings.pattern is not None:
            rx = re.compile(settings.pattern)
            found = sorted(t for t in ok if rx.fullmatch(t) and not t.startswith("__"))
            missing = [] if found else [settings.pattern]
        else:
            found = list(settings.topics)
            missing = [t for t in settings.topics if t not in ok]
        if not missing:
            self._waiting_since = None
            return found
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        waited = now - self._waiting_since
        if waited >= settings.topic_wait_s:
            raise KafkaTopicMissingError(
                E_TOPIC_MISSING.format(
                    topics=", ".join(missing),
                    first=missing[0],
                    bootstrap=settings.bootstrap,
                    waited_s=waited,
                    wait_s=settings.topic_wait_s,
                )
            )
        self._warn("Kafka topic %s missing; waiting", ", ".join(missing))
        self.waiting_for_source(
            f"Kafka topic {', '.join(missing)} missing at {settings.bootstrap} "
            f"(waited {waited:.0f} s of sr3.kafka.topic.wait.s="
            f"{settings.topic_wait_s:g})"
        )
        return None

    def _log_start(self, topic: str, partition: int) -> int | None:
        """Return the partition's first offset (None: the broker did not answer)."""
        consumer = self._consumer
        if consumer is None:
            return None
        try:
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=_METADATA_TIMEOUT_S
            )
        except KafkaException as exc:
            self._warn("watermarks of %s unavailable (%s); waiting", topic, exc)
            self.waiting_for_source(f"Kafka watermarks of {topic} unavailable ({exc})")
            return None
        return int(low)
