"""Kafka settings, offset keys, writers, marker and snapshot logic (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from sr3.errors import ConfigError
from topology_api.kafka.delivery import (
    NEXT_KEY,
    NO_MARKER,
    OUT_KEY,
    DeliveryThread,
    Marker,
    snapshot_outputs,
)
from topology_api.kafka.settings import (
    KAFKA_KEYS,
    SinkSettings,
    SpoutSettings,
    partition_key,
)
from topology_api.kafka.writers import SPARK_WRITER, transactional_id

BASE = {"sr3.kafka.bootstrap": "127.0.0.1:9092"}


def test_spout_settings_read_topics_and_document_defaults() -> None:
    settings = SpoutSettings.from_conf({**BASE, "sr3.kafka.topics": "a, b"})
    assert settings.topics == ("a", "b")
    assert settings.pattern is None
    assert (settings.record_format, settings.start, settings.bad_records) == (
        "text",
        "earliest",
        "fail",
    )
    assert settings.topic_wait_s == 0.0
    listed = SpoutSettings.from_conf({**BASE, "sr3.kafka.topics": ["x"]})
    assert listed.topics == ("x",)


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ({"sr3.kafka.topics": "a"}, "sr3.kafka.bootstrap"),
        ({**BASE}, "sr3.kafka.topic.pattern"),
        (
            {**BASE, "sr3.kafka.topics": "a", "sr3.kafka.topic.pattern": "a.*"},
            "not both",
        ),
        ({**BASE, "sr3.kafka.topic.pattern": "("}, "sr3.kafka.topic.pattern"),
        (
            {**BASE, "sr3.kafka.topics": "a", "sr3.kafka.format": "xml"},
            "sr3.kafka.format",
        ),
        (
            {**BASE, "sr3.kafka.topics": "a", "sr3.kafka.bad.records": "dead-letter"},
            "sr3.kafka.dead.letter.topic",
        ),
        ({**BASE, "sr3.kafka.topics": "a", "sr3.kafka.topic.wait.s": -1}, "wait.s"),
        ({**BASE, "sr3.kafka.topics": "a", "sr3.kafka.poll.s": "soon"}, "poll.s"),
    ],
)
def test_bad_spout_settings_name_the_key(conf: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        SpoutSettings.from_conf(conf)


def test_sink_settings_default_to_exactly_once_and_need_a_topic() -> None:
    settings = SinkSettings.from_conf({**BASE, "sr3.kafka.sink.topic": "out"})
    assert settings.guarantee == "exactly-once"
    assert settings.marker_topic == "_sr3_sink_commits"
    with pytest.raises(ConfigError, match="sr3.kafka.sink.topic"):
        SinkSettings.from_conf(BASE)
    with pytest.raises(ConfigError, match="sr3.kafka.sink.guarantee"):
        SinkSettings.from_conf(
            {**BASE, "sr3.kafka.sink.topic": "o", "sr3.kafka.sink.guarantee": "maybe"}
        )


def test_sr3_run_accepts_every_kafka_key() -> None:
    from sr3_cli.run_checks import ENGINE_KEYS  # noqa: PLC0415 (the CLI's list)

    assert KAFKA_KEYS <= ENGINE_KEYS


def test_partition_keys_are_topic_colon_partition() -> None:
    assert partition_key("my.topic-1", 3) == "my.topic-1:3"


def test_storm_tasks_and_the_spark_driver_write_with_distinct_stable_ids() -> None:
    storm = [transactional_id("wc", "out", index) for index in range(3)]
    spark = transactional_id("wc", "out", SPARK_WRITER)
    assert storm == ["sr3-wc-out-0", "sr3-wc-out-1", "sr3-wc-out-2"]
    assert spark == "sr3-wc-out-spark"


def test_a_marker_covers_only_outputs_of_its_own_run() -> None:
    marker = Marker(epoch=7, run="r1", seq=10)
    assert marker.covers("r1", 10)
    assert not marker.covers("r1", 11)
    assert not marker.covers("r2", 0)  # a fresh run starts over at 0
    assert not NO_MARKER.covers("r1", 0)


def test_snapshot_outputs_finds_the_run_and_sorts_outputs() -> None:
    items = [
        ((OUT_KEY, 5), {"v": b"e"}),
        (NEXT_KEY, {"n": 6, "r": "abc"}),
        ((OUT_KEY, 2), {"v": b"b", "k": b"w"}),
        (("other",), {"x": 1}),
    ]
    snapshot = snapshot_outputs(items)
    assert snapshot.run == "abc"
    assert [seq for seq, _ in snapshot.outputs] == [2, 5]


class _Record:
    def __init__(self, epoch: int, owners: tuple[str, ...]) -> None:
        self.epoch = epoch
        self.owners = owners


class _Delivery:
    """Records what would be written (the Kafka side has integration tests)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int]]] = []

    def deliver(self, epoch: int, snapshot: Any) -> Marker:
        seqs = [s for s, _ in snapshot.outputs]
        self.calls.append((epoch, seqs))
        return Marker(epoch, snapshot.run, seqs[-1] if seqs else -1)


def test_the_delivery_thread_writes_each_committed_epoch_once() -> None:
    records = [None, _Record(3, ()), _Record(4, ("t/s/0",)), _Record(4, ("t/s/0",))]
    delivery = _Delivery()
    markers: list[Marker] = []
    thread = DeliveryThread(
        delivery=delivery,  # type: ignore[arg-type]
        committed=lambda: records.pop(0),
        restore=lambda record: [((OUT_KEY, 0), {"v": b"x"}), (NEXT_KEY, {"r": "r"})],
        owner="t/s/0",
        on_delivered=markers.append,
        poll_s=1.0,
    )
    for _ in range(4):
        thread.step()
    # nothing committed, then an epoch without the sink's state, then epoch 4 once
    assert delivery.calls == [(4, [0])]
    assert markers == [Marker(4, "r", 0)]
