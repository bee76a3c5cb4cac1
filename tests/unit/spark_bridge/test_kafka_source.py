"""Kafka records to bridge rows and Spark's Kafka options, without Spark or a broker."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_bridge.kafka_source import KafkaRows
from spark_bridge.kafka_start import KafkaStart
from spark_bridge.rows import EMIT, OFFSET, ComponentRef, rows_of
from sr3.codec import decode_value
from storm_bridge.kafka import KafkaRecordError

FILE = Path(__file__).resolve().parents[3] / "topologies" / "kafka_wordcount.py"
CONF = {"sr3.kafka.bootstrap": "127.0.0.1:1", "sr3.kafka.topics": "lines"}


def kafka_batch(
    records: list[tuple[str, int, int, bytes | None]],
) -> pa.RecordBatch:
    topics, partitions, offsets, values = zip(*records, strict=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(values, pa.binary()),
            pa.array([None] * len(values), pa.binary()),
        ],
        names=["topic", "partition", "offset", "value", "key"],
    )


def test_start_gives_spark_every_assigned_partition_and_the_tasks_positions() -> None:
    start = KafkaStart(
        component="lines",
        bootstrap="b:1",
        tasks={"t:0": 0, "t:1": 1, "t:2": 0},
        starting={"t:0": 7, "t:2": 3},
        start="earliest",
    )

    assert json.loads(start.assign_json()) == {"t": [0, 1, 2]}
    # a partition the epoch has no offset for starts at sr3.kafka.start (-2)
    assert json.loads(start.starting_json()) == {"t": {"0": 7, "1": -2, "2": 3}}
    assert start.positions() == {"lines/0": {"t:0": 7, "t:2": 3}}


def test_records_become_emits_of_the_owning_task_then_one_offset_row() -> None:
    ref = ComponentRef(str(FILE), "lines", CONF)
    rows_fn = KafkaRows(ref, {"lines:0": 0, "lines:1": 1})

    out = [
        row
        for batch in rows_fn(
            iter([kafka_batch([("lines", 1, 40, b"a b"), ("lines", 1, 41, b"c")])])
        )
        for row in rows_of(batch)
    ]

    emits = [r for r in out if r[2] == EMIT]
    assert [decode_value(r[3]) for r in emits] == [["a b"], ["c"]]
    assert [r[6] for r in emits] == ["000000000.0001", "000000001.0001"]
    assert len({r[4] for r in emits}) == 1  # task 1's Storm task id
    [offset] = [r for r in out if r[2] == OFFSET]
    assert offset[1] == "1"
    assert decode_value(offset[3]) == {"lines:1": 42}
    assert decode_value(offset[5]) == 2


def test_a_record_that_is_not_utf8_fails_naming_topic_partition_and_offset() -> None:
    ref = ComponentRef(str(FILE), "lines", CONF)
    rows_fn = KafkaRows(ref, {"lines:0": 0})

    with pytest.raises(KafkaRecordError, match=r"offset 5 of Kafka topic lines"):
        list(rows_fn(iter([kafka_batch([("lines", 0, 5, b"\xff\xfe")])])))
