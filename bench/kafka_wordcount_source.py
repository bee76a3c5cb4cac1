"""The source side of bench/kafka_wordcount.py: lines, topics and the source's rates.

The corpus of lines, topics and a producer for them, and the two rates that need
no engine: a plain consumer reading the topic (the source's bound) and
``KafkaSpout`` alone, driven in-process.
"""

from __future__ import annotations

import io
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from storm_bridge.kafka import KafkaSpout

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def lines_of(count: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j) % 10] for j in range(6)) for i in range(count)]


def topic(admin: AdminClient, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, name: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, value in enumerate(values):
        producer.produce(name, value=value.encode(), partition=i % 2)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)


def plain_consumer(bootstrap: str, name: str, total: int) -> float:
    """Records/s of one consumer reading ``total`` records from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in (0, 1)])
    started, seen = time.perf_counter(), 0
    while seen < total:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    return total / seconds


def spout_alone(bootstrap: str, name: str, total: int) -> float:
    """Records/s of KafkaSpout's next_tuple loop, both partitions, emits to memory."""
    spout = KafkaSpout(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    spout.serializer.output_stream = io.StringIO()  # the multilang JSON, in memory
    context = {"componentid": "lines", "taskid": 1, "task->component": {"1": "lines"}}
    spout.initialize(
        {"sr3.kafka.bootstrap": bootstrap, "sr3.kafka.topics": name}, context
    )
    spout.seek(None)
    started = time.perf_counter()
    while spout.emitted < total:
        spout.next_tuple()
    seconds = time.perf_counter() - started
    spout.seek(None)
    return total / seconds
