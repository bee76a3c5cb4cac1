"""The Spark driver's pending Kafka outputs, in the Storm sink's state layout."""

from __future__ import annotations

from spark_bridge.kafka_sink import SparkKafkaSink
from sr3.codec import decode_key, decode_value, encode_value
from topology_api.kafka.delivery import NO_MARKER, EpochDelivery, snapshot_outputs
from topology_api.kafka.settings import SinkSettings

CONF = {"sr3.kafka.bootstrap": "127.0.0.1:1", "sr3.kafka.sink.topic": "counts"}


def sink(run: str) -> SparkKafkaSink:
    settings = SinkSettings.from_conf(CONF)
    delivery = EpochDelivery(
        settings=settings, owner="wc/out/spark", transactional_id="t"
    )
    return SparkKafkaSink("out", {}, settings, delivery, run, "wc/out/spark")


def test_pending_outputs_read_back_as_a_storm_sink_tasks_snapshot() -> None:
    outputs = [
        ((3 << 32) + 0, {"k": b"a", "v": b"1"}),
        ((3 << 32) + 1, {"k": None, "v": b"2"}),
    ]

    state = sink("query-1").pending(outputs)
    # as the ring stores and restores them: encoded keys, msgpack fields
    items = [(decode_key(k), decode_value(encode_value(v))) for k, v in state.items()]
    snapshot = snapshot_outputs(items)

    assert snapshot.run == "query-1"
    assert snapshot.outputs == outputs
    assert not any(NO_MARKER.covers(snapshot.run, seq) for seq, _ in outputs)


def test_a_batch_without_outputs_keeps_only_its_run() -> None:
    snapshot = snapshot_outputs(
        [(decode_key(k), v) for k, v in sink("query-2").pending([]).items()]
    )

    assert snapshot.run == "query-2"
    assert snapshot.outputs == []
