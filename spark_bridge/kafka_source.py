"""A ``KafkaSpout`` on Spark: Spark's own Kafka source, from our epochs' offsets.

The topology file is the one the Storm engine runs; on Spark its
``KafkaSpout`` components read through ``spark-sql-kafka-0-10`` instead of
confluent-kafka. What is kept the same, so a run can hand off between engines
in either direction on one topic:

- **dealing**: the partitions of the spout's topics (or pattern, resolved at
  the start) are sorted by (topic, partition) and dealt to the spout's task
  indexes round-robin, as the Storm ``KafkaSpout`` deals them; Spark reads
  exactly those partitions (its ``assign`` option);
- **offsets**: a committed epoch records ``{"spout/index": {"topic:partition":
  next offset}}``; Spark starts each partition there (``startingOffsets``),
  or at ``sr3.kafka.start`` when the epoch has none for it. Each micro-batch
  ends with one ``offset`` row per partition read, which the sink folds into
  the task's offsets for the epoch it commits
  (:class:`spark_bridge.sink.BatchSink`). Spark's checkpoint keeps its own
  copy only to re-run a batch; the epochs are the source of truth;
- **records**: the spout's own ``decode`` (``sr3.kafka.format``) turns a value
  into a tuple, on an executor hosting the spout task that owns the partition;
  the emit row carries that task's Storm task id. The consumer reads
  ``read_committed``, as the Storm spout does.

Checked on the driver before the query starts: the topics exist (waiting
``sr3.kafka.topic.wait.s``), and no recorded offset is below its partition's
log start (retention). A broker that does not answer is waited for, with a
warning every 10 s, as the Storm engine's spout waits for it.
Bad records follow the spout's own ``sr3.kafka.bad.records`` on the executor
(:meth:`KafkaSpout.record_values`): the query fails naming the record, or the
record goes to the dead-letter topic and its offset is still consumed.
``maxRowsPerBatch`` bounds a micro-batch's records (``maxOffsetsPerTrigger``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from spark_bridge.context import storm_conf
from spark_bridge.errors import SparkBridgeError
from spark_bridge.hosting import DEFAULT_STREAM, Host, topology_of
from spark_bridge.kafka_jars import E_NO_JARS
from spark_bridge.rows import (
    EMIT,
    OFFSET,
    ROW_ARROW_SCHEMA,
    ROW_SCHEMA,
    ComponentRef,
    Row,
    record_batch,
    storm_values,
)
from sr3.codec import encode_value
from storm_bridge.kafka.errors import (
    E_OFFSET_GONE,
    E_TOPIC_MISSING,
    KafkaOffsetGoneError,
    KafkaTopicMissingError,
)
from storm_bridge.kafka.settings import SpoutSettings
from storm_bridge.topology import LoadedTopology

__all__ = [
    "KafkaStart",
    "is_kafka_spout",
    "kafka_frame",
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


def _partition_key(topic: str, partition: int) -> str:
    # storm_bridge.kafka.partition_key, without loading confluent-kafka here
    return f"{topic}:{partition}"


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
    dealt = {_partition_key(t, p): i % tasks for i, (t, p) in enumerate(partitions)}
    starting: dict[str, int] = {}
    for topic, partition in partitions:
        key = _partition_key(topic, partition)
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


#: (topology path, environment, component, conf JSON, task index) -> spout task
_hosts: dict[tuple[str, str | None, str, str, int], Host] = {}


def _hosted(ref: ComponentRef, conf_json: str, index: int) -> Host:
    """Return spout task ``index``, initialized once per Python worker."""
    kept = (ref.topology_path, ref.environment, ref.component, conf_json, index)
    host = _hosts.get(kept)
    if host is None:
        host = _hosts[kept] = Host(topology_of(ref), ref.component, index, ref.conf)
    return host


@dataclass(frozen=True)
class KafkaRows:
    """``mapInArrow`` function: Kafka records to the bridge's emit and offset rows.

    One Spark partition is one Kafka partition's records of the micro-batch: each
    becomes an emit row of the spout task the partition is dealt to (seq
    ``f"{k * n + r:09d}.{task:04d}"``, the ``k``-th record of the task's ``r``-th
    of ``n`` partitions), and the partition's next offset one ``offset`` row.
    """

    ref: ComponentRef
    tasks: Mapping[str, int]

    def _seq_base(self) -> dict[str, tuple[int, int, int]]:
        by_task: dict[int, list[str]] = {}
        for key, index in sorted(self.tasks.items()):
            by_task.setdefault(index, []).append(key)
        return {
            key: (index, rank, len(keys))
            for index, keys in by_task.items()
            for rank, key in enumerate(keys)
        }

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Turn the record batches of one Spark partition into bridge rows.

        Raises:
            KafkaRecordError: a record is not valid for ``sr3.kafka.format``.
        """
        ref = self.ref
        conf_json = json.dumps(dict(ref.conf), sort_keys=True, default=str)
        seq_base = self._seq_base()
        ends: dict[str, int] = {}
        counts: dict[str, int] = {}
        for batch in batches:
            rows: list[Row] = []
            columns = [batch.column(n).to_pylist() for n in batch.schema.names]
            for record in zip(*columns, strict=True):
                topic, partition, offset = record[0], record[1], record[2]
                key = _partition_key(topic, partition)
                index, rank, width = seq_base[key]
                host = _hosted(ref, conf_json, index)
                ends[key] = offset + 1
                values = self._decode(host, record)
                if values is None:  # dead-lettered: read, never emitted
                    continue
                k = counts.get(key, 0)
                counts[key] = k + 1
                rows.append(
                    (
                        ref.component,
                        DEFAULT_STREAM,
                        EMIT,
                        encode_value(storm_values(values)),
                        host.task_key,
                        None,
                        f"{k * width + rank:09d}.{index:04d}",
                    )
                )
            if rows:
                yield record_batch(rows, ROW_ARROW_SCHEMA)
        offsets: list[Row] = [
            (
                ref.component,
                str(seq_base[key][0]),
                OFFSET,
                encode_value({key: end}),
                None,
                encode_value(counts[key]),
                "",
            )
            for key, end in sorted(ends.items())
        ]
        if offsets:
            yield record_batch(offsets, ROW_ARROW_SCHEMA)

    def _decode(
        self,
        host: Host,
        record: tuple[str, int, int, bytes | None, bytes | None],
    ) -> list[Any] | None:
        topic, partition, offset, value, key = record
        values: list[Any] | None = host.instance.record_values(
            value, key=key, topic=topic, partition=partition, offset=offset
        )
        return values


def kafka_frame(
    spark: SparkSession, ref: ComponentRef, start: KafkaStart, *, max_rows: int
) -> DataFrame:
    """Return the spout's rows (:data:`ROW_SCHEMA`) read by Spark's Kafka source.

    Raises:
        SparkBridgeError: Spark's Kafka source is not on the classpath.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", start.bootstrap)
        .option("assign", start.assign_json())
        .option("startingOffsets", start.starting_json())
        .option("kafka.isolation.level", "read_committed")
        # an offset below the log start fails the query, never a silent jump
        .option("failOnDataLoss", "true")
    )
    if max_rows > 0:
        reader = reader.option("maxOffsetsPerTrigger", str(max_rows))
    try:
        frame = reader.load()
    except AnalysisException as exc:
        if "kafka" not in str(exc).lower():
            raise
        detail = f" (spout {ref.component!r}: {str(exc).splitlines()[0]})"
        raise SparkBridgeError(E_NO_JARS.format(detail=detail)) from exc
    rows = KafkaRows(ref, dict(start.tasks))
    return frame.select("topic", "partition", "offset", "value", "key").mapInArrow(
        rows, ROW_SCHEMA
    )
