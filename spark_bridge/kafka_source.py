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

The dealing and the starting offsets are planned on the driver before the
query starts, with their checks (:mod:`spark_bridge.kafka_start`).
Bad records follow the spout's own ``sr3.kafka.bad.records`` on the executor
(:meth:`KafkaSpout.record_values`): the query fails naming the record, or the
record goes to the dead-letter topic and its offset is still consumed.
``maxRowsPerBatch`` bounds a micro-batch's records (``maxOffsetsPerTrigger``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from spark_bridge.errors import SparkBridgeError
from spark_bridge.hosting import DEFAULT_STREAM, Host
from spark_bridge.kafka_jars import E_NO_JARS
from spark_bridge.kafka_start import KafkaStart
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
from spark_bridge.worker import topology_of
from sr3.codec import encode_value
from topology_api.kafka.settings import partition_key

__all__ = ["KafkaRows", "kafka_frame"]

#: (topology path, environment, parallelism, component, conf JSON, task index)
#: -> spout task
_hosts: dict[
    tuple[str, str | None, tuple[tuple[str, int], ...], str, str, int], Host
] = {}


def _hosted(ref: ComponentRef, conf_json: str, index: int) -> Host:
    """Return spout task ``index``, initialized once per Python worker."""
    kept = (
        ref.topology_path,
        ref.environment,
        ref.parallelism,
        ref.component,
        conf_json,
        index,
    )
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
                key = partition_key(topic, partition)
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
