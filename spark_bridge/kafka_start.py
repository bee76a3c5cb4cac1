"""Where a ``KafkaSpout`` starts on Spark: its partitions dealt to tasks, its offsets.

Planned on the driver before the query starts (:func:`kafka_starts`), as the
Storm engine's ``KafkaSpout`` does, so a run can hand off between engines:

- **dealing**: the partitions of the spout's topics (or pattern, resolved at
  the start) are sorted by (topic, partition) and dealt to the spout's task
  indexes round-robin, as the Storm ``KafkaSpout`` deals them; Spark reads
  exactly those partitions (its ``assign`` option);
- **offsets**: a committed epoch records ``{"spout/index": {"topic:partition":
  next offset}}``; Spark starts each partition there (``startingOffsets``),
  or at ``sr3.kafka.start`` when the epoch has none for it.

Checked here: the topics exist (waiting ``sr3.kafka.topic.wait.s``), and no
recorded offset is below its partition's log start (retention). A broker that
does not answer is waited for, with a warning every 10 s, as the Storm engine's
spout waits for it. :mod:`spark_bridge.kafka_source` reads from these starts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from spark_bridge.context import storm_conf
from topology_api.kafka.errors import (
    E_OFFSET_GONE,
    E_TOPIC_MISSING,
    KafkaOffsetGoneError,
    KafkaTopicMissingError,
)
from topology_api.kafka.settings import SpoutSettings, partition_key
from topology_api.topology import LoadedTopology

__all__ = [
    "KafkaStart",
    "is_kafka_spout",
    "kafka_starts",
    "plan_kafka_start",
]

logger = logging.getLogger(__name__)

_METADATA_TIMEOUT_S: Final = 10.0
#: Seconds between two "broker unreachable" warnings while the driver waits.
_WARN_EVERY_S: Final = 10.0
_TOPIC_POLL_S: Final = 0.25
#: Spark's ``startingOffsets`` codes for a partition's first and next offsets.
_EARLIEST: Final = -2
_LATEST: Final = -1


def is_kafka_spout(cls: type) -> bool:
    """Whether ``cls`` is a ``KafkaSpout`` (found by name: nothing is imported)."""
    return any(
        c.__name__ == "KafkaSpout" and c.__module__ == "storm_bridge.kafka.spout"
        for c in cls.__mro__
    )


@dataclass(frozen=True)
class KafkaStart:
    """Where a Kafka spout starts on Spark, and which task reads which partition.

    Attributes:
        component: The spout.
        bootstrap: ``sr3.kafka.bootstrap``.
        tasks: ``{"topic:partition": task index}`` (the Storm spout's dealing).
        starting: ``{"topic:partition": next offset}`` of partitions the epoch
            recorded; the others start at ``start``.
        start: ``sr3.kafka.start`` (``earliest`` or ``latest``).
    """

    component: str
    bootstrap: str
    tasks: Mapping[str, int]
    starting: Mapping[str, int]
    start: str

    def assign_json(self) -> str:
        """Return Spark's ``assign`` option: ``{"topic": [partitions]}``."""
        out: dict[str, list[int]] = {}
        for key in self.tasks:
            topic, _sep, partition = key.rpartition(":")
            out.setdefault(topic, []).append(int(partition))
        return json.dumps({t: sorted(p) for t, p in sorted(out.items())})

    def starting_json(self) -> str:
        """Return Spark's ``startingOffsets`` option, every assigned partition."""
        default = _EARLIEST if self.start == "earliest" else _LATEST
        out: dict[str, dict[str, int]] = {}
        for key in sorted(self.tasks):
            topic, _sep, partition = key.rpartition(":")
            out.setdefault(topic, {})[partition] = self.starting.get(key, default)
        return json.dumps(out)

    def positions(self) -> dict[str, dict[str, int]]:
        """Return the recorded offsets by task: ``{"spout/index": {key: offset}}``."""
        out: dict[str, dict[str, int]] = {}
        for key, index in sorted(self.tasks.items()):
            if key in self.starting:
                out.setdefault(f"{self.component}/{index}", {})[key] = self.starting[
                    key
                ]
        return out


def _resolve_topics(consumer: Any, settings: SpoutSettings) -> dict[str, Any]:
    """Return the metadata of the topics to read, waiting for missing ones.

    Raises:
        KafkaTopicMissingError: a topic is still missing after
            ``sr3.kafka.topic.wait.s``.
    """
    import re  # noqa: PLC0415 (only with a pattern)

    started = time.monotonic()
    while True:
        existing = consumer.list_topics(timeout=_METADATA_TIMEOUT_S).topics
        ok = {t: m for t, m in existing.items() if m.error is None}
        if settings.pattern is not None:
            rx = re.compile(settings.pattern)
            found = {
                t: m
                for t, m in ok.items()
                if rx.fullmatch(t) and not t.startswith("__")
            }
            missing = [] if found else [settings.pattern]
        else:
            found = {t: ok[t] for t in settings.topics if t in ok}
            missing = [t for t in settings.topics if t not in ok]
        waited = time.monotonic() - started
        if not missing:
            return found
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
        time.sleep(_TOPIC_POLL_S)


def plan_kafka_start(
    settings: SpoutSettings,
    *,
    component: str,
    tasks: int,
    offsets: Mapping[str, Any] | None,
) -> KafkaStart:
    """Deal the partitions to tasks and check the recorded offsets (on the driver).

    Args:
        settings: The spout's settings.
        component: The spout.
        tasks: Its parallelism.
        offsets: The committed record's offsets (``{"spout/index": {...}}``).

    Raises:
        KafkaTopicMissingError: a topic does not exist.
        KafkaOffsetGoneError: a recorded offset is below its partition's log start.
    """
    from confluent_kafka import Consumer, KafkaException  # noqa: PLC0415

    recorded: dict[str, int] = {}
    for index in range(tasks):
        own = (offsets or {}).get(f"{component}/{index}")
        if isinstance(own, Mapping):
            recorded.update({str(k): int(v) for k, v in own.items()})
    # an epoch of a spout task count no longer used still holds its partitions
    for name, own in (offsets or {}).items():
        if str(name).startswith(f"{component}/") and isinstance(own, Mapping):
            for key, value in own.items():
                recorded.setdefault(str(key), int(value))
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"sr3-unused-{component}-spark",
            "enable.auto.commit": False,
        }
    )
    warned_at: float | None = None
    try:
        while True:
            try:
                return _plan(consumer, settings, component, tasks, recorded)
            except KafkaException as exc:
                now = time.monotonic()
                if warned_at is None or now - warned_at >= _WARN_EVERY_S:
                    warned_at = now
                    logger.warning(
                        "spout %s: Kafka at %s unreachable (%s); waiting for it "
                        "(start the broker, e.g. `sr3 lab up --kafka`, or fix "
                        "sr3.kafka.bootstrap)",
                        component,
                        settings.bootstrap,
                        exc,
                    )
                time.sleep(_TOPIC_POLL_S)
    finally:
        consumer.close()


def _plan(
    consumer: Any,
    settings: SpoutSettings,
    component: str,
    tasks: int,
    recorded: Mapping[str, int],
) -> KafkaStart:
    """Deal and check once; a broker that does not answer raises KafkaException."""
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    topics = _resolve_topics(consumer, settings)
    partitions = sorted((t, p) for t, meta in topics.items() for p in meta.partitions)
    dealt = {partition_key(t, p): i % tasks for i, (t, p) in enumerate(partitions)}
    starting: dict[str, int] = {}
    for topic, partition in partitions:
        key = partition_key(topic, partition)
        wanted = recorded.get(key)
        if wanted is None:
            continue
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_METADATA_TIMEOUT_S
        )
        if wanted < low:
            raise KafkaOffsetGoneError(
                E_OFFSET_GONE.format(
                    spout=f"{component}/{dealt[key]}",
                    offset=wanted,
                    topic=topic,
                    partition=partition,
                    start=low,
                )
            )
        starting[key] = wanted
    return KafkaStart(component, settings.bootstrap, dealt, starting, settings.start)


def kafka_starts(
    topology: LoadedTopology,
    spouts: tuple[str, ...],
    overrides: Mapping[str, Any],
    offsets: Mapping[str, Any] | None,
) -> dict[str, KafkaStart]:
    """Return the :class:`KafkaStart` of every ``KafkaSpout`` among ``spouts``.

    Raises:
        ConfigError: a spout's ``sr3.kafka.*`` settings are invalid.
        KafkaTopicMissingError, KafkaOffsetGoneError: see
            :func:`plan_kafka_start`.
    """
    starts: dict[str, KafkaStart] = {}
    for name in spouts:
        component = topology.components[name]
        if not is_kafka_spout(component.component_cls):
            continue
        settings = SpoutSettings.from_conf(storm_conf(topology, name, overrides))
        starts[name] = plan_kafka_start(
            settings, component=name, tasks=component.tasks, offsets=offsets
        )
    return starts
