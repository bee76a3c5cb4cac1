"""``sr3.config_table``: one table of keys, one validation, unknown keys reported."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sr3.config import KEYS, CheckpointConfig, Sr3Config, read_setting
from sr3.errors import ConfigError

#: Every key's default as the modules read it before the table existed: a row
#: whose default drifts changes what an unconfigured topology does.
DEFAULTS: dict[str, Any] = {
    "sr3.ring.vnodes": 2048,
    "sr3.ring.replication.factor": 3,
    "sr3.ring.write.quorum": 2,
    "sr3.ring.max.shard.bytes": 4 * 1024 * 1024,
    "sr3.state.key.groups": 256,
    "sr3.node.secret": "",
    "sr3.node.max.frame.bytes": 64 * 1024 * 1024,
    "sr3.node.io.timeout.s": 30.0,
    "sr3.node.connect.timeout.s": 3.0,
    "sr3.node.chunk.bytes": 1024 * 1024,
    "sr3.zk.hosts": "",
    "sr3.zk.chroot": "/sr3/default",
    "sr3.zk.session.timeout.s": 2.0,
    "sr3.zk.connect.timeout.s": 15.0,
    "sr3.zk.digest": "",
    "sr3.repair.grace.s": 0.5,
    "sr3.repair.scan.interval.s": 5.0,
    "sr3.repair.parallel.copies": 8,
    "sr3.repair.scrub.interval.s": 600.0,
    "sr3.repair.orphan.grace.s": 3600.0,
    "sr3.recovery.mechanism": "auto",
    "sr3.recovery.tree.fanout": 2,
    "sr3.checkpoint.max.chain.length": 8,
    "sr3.recovery.latency.target.s": None,
    "sr3.recovery.lazy.install": True,
    "sr3.recovery.lazy": True,
    "sr3.checkpoint.interval.s": 1.0,
    "sr3.checkpoint.timeout.s": 60.0,
    "sr3.checkpoint.mode": "local",
    "sr3.checkpoint.retain": 1,
    "sr3.checkpoint.rollback.quiet.s": 1.0,
    "sr3.straggler.policy": "off",
    "sr3.straggler.lag.s": 5.0,
    "sr3.straggler.rate.ratio": 0.2,
    "sr3.straggler.queue.min": 1000,
    "sr3.straggler.check.s": 1.0,
    "sr3.recovery.scope": "task",
    "sr3.recovery.buffer.bytes": 64 * 1024**2,
    "sr3.storm.json.integer.boxing": "long",
    "sr3.rebalance.routing": "fields",
    "sr3.rebalance.batch.key.groups": 16,
    "sr3.local.fork.tasks": True,
    "sr3.idle.quiet.s": 2.0,
    "sr3.output.key.fields": None,
    "sr3.on.error": "fail",
    "sr3.kafka.bootstrap": "",
    "sr3.kafka.topics": (),
    "sr3.kafka.topic.pattern": None,
    "sr3.kafka.format": "text",
    "sr3.kafka.start": "earliest",
    "sr3.kafka.topic.wait.s": 0.0,
    "sr3.kafka.bad.records": "fail",
    "sr3.kafka.dead.letter.topic": None,
    "sr3.kafka.batch.records": 500,
    "sr3.kafka.poll.s": 0.05,
    "sr3.kafka.sink.topic": "",
    "sr3.kafka.sink.guarantee": "exactly-once",
    "sr3.kafka.sink.key.field": None,
    "sr3.kafka.sink.marker.topic": "_sr3_sink_commits",
    "sr3.kafka.sink.poll.s": 0.05,
    "sr3.metrics.enabled": True,
    "sr3.metrics.port": 0,
}


def test_an_empty_conf_gives_the_defaults_modules_read_before() -> None:
    assert Sr3Config.from_mapping({}).to_mapping() == DEFAULTS


def test_table_defaults_are_the_sections_defaults() -> None:
    assert {name: key.default for name, key in KEYS.items()} == DEFAULTS
    assert Sr3Config().to_mapping() == DEFAULTS


def test_unset_null_and_blank_values_take_the_default() -> None:
    conf = {"sr3.checkpoint.mode": None, "sr3.kafka.format": "", "sr3.ring.vnodes": ""}
    config = Sr3Config.from_mapping(conf)
    assert config.checkpoint.mode == "local"
    assert config.kafka.record_format == "text"
    assert config.ring.vnodes == 2048


def test_the_new_sections_read_their_keys() -> None:
    config = Sr3Config.from_mapping(
        {
            "sr3.checkpoint.interval.s": "0.5",
            "sr3.checkpoint.timeout.s": 30,
            "sr3.checkpoint.mode": "native",
            "sr3.checkpoint.rollback.quiet.s": 2,
            "sr3.storm.json.integer.boxing": "integer",
            "sr3.idle.quiet.s": 0,
            "sr3.output.key.fields": "word, day",
            "sr3.on.error": "dead-letter",
            "sr3.kafka.topics": "a,,b",
            "sr3.kafka.batch.records": "10",
        }
    )
    assert config.checkpoint.interval_s == 0.5
    assert config.checkpoint.timeout_s == 30.0
    assert config.checkpoint.mode == "native"
    assert config.checkpoint.rollback_quiet_s == 2.0
    assert config.storm.integer_boxing == "integer"
    assert config.storm.idle_quiet_s == 0.0
    assert config.output.key_fields == ("word", "day")
    assert config.output.on_error == "dead-letter"
    assert config.kafka.topics == ("a", "b")
    assert config.kafka.batch_records == 10


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("sr3.ring.vnodes", 0, "1..4096"),
        ("sr3.ring.vnodes", "many", "1..4096"),
        ("sr3.recovery.mechanism", "bogus", "one of star, line, tree, auto"),
        ("sr3.checkpoint.mode", "trident", "one of local, native"),
        ("sr3.checkpoint.interval.s", 0, "> 0 and <= 1000000 seconds"),
        ("sr3.checkpoint.timeout.s", "soon", "> 0 and <= 1000000 seconds"),
        ("sr3.checkpoint.rollback.quiet.s", -1, "> 0 and <= 1000000 seconds"),
        ("sr3.storm.json.integer.boxing", "short", "one of 'long' (Storm < 2.6)"),
        ("sr3.idle.quiet.s", "2", "a non-negative number of seconds"),
        ("sr3.output.key.fields", 3, "a list of field names"),
        ("sr3.on.error", "ignore", "one of fail, dead-letter"),
        ("sr3.kafka.format", "xml", "one of text, json"),
        ("sr3.kafka.batch.records", 2.5, ">= 1"),
        ("sr3.kafka.sink.poll.s", 0, ">= 0.001"),
        ("sr3.kafka.topic.pattern", "(", "a regular expression"),
        ("sr3.recovery.lazy.install", "maybe", "true or false"),
    ],
)
def test_a_bad_value_names_the_key_the_value_and_the_accepted_values(
    key: str, value: object, accepted: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Sr3Config.from_mapping({key: value})
    text = str(info.value)
    assert f"{key}={value!r} " in text
    assert f"; use {accepted}" in text


def test_a_secret_value_is_not_shown_in_the_error() -> None:
    with pytest.raises(ConfigError) as info:
        Sr3Config.from_mapping({"sr3.zk.digest": "hunter2"})
    assert "sr3.zk.digest=*** is not user:password" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_read_setting_checks_one_key_and_names_the_component() -> None:
    assert read_setting({}, "sr3.on.error") == "fail"
    assert read_setting({"sr3.checkpoint.mode": "native"}, "sr3.checkpoint.mode") == (
        "native"
    )
    with pytest.raises(ConfigError, match=r"^component 'seen': sr3\.on\.error="):
        read_setting(
            {"sr3.on.error": "ignore"}, "sr3.on.error", where="component 'seen':"
        )


def test_an_unknown_key_is_refused_with_the_closest_known_one() -> None:
    with pytest.raises(ConfigError) as info:
        Sr3Config.from_mapping({"sr3.checkpoint.intervl.s": 1})
    text = str(info.value)
    assert "'sr3.checkpoint.intervl.s'" in text
    assert "did you mean sr3.checkpoint.interval.s" in text


def test_an_unknown_key_far_from_all_points_to_the_docs() -> None:
    with pytest.raises(ConfigError, match="docs/configuration.md lists every key"):
        Sr3Config.from_mapping({"sr3.zzzzzzzzzzzzzzzzzzzzzz": 1})


def test_not_strict_warns_of_unknown_keys_and_reads_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conf = {
        "topology.workers": 2,
        "sr3.ring.vnodse": 1,
        "sr3.checkpoint.mode": "native",
    }
    with caplog.at_level(logging.WARNING, logger="sr3.config"):
        config = Sr3Config.from_mapping(conf, strict=False)
    assert config.checkpoint.mode == "native"
    assert config.ring.vnodes == 2048
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "'sr3.ring.vnodse'" in message
    assert "did you mean sr3.ring.vnodes" in message


def test_not_strict_still_checks_known_values() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.checkpoint\.mode='trident'"):
        Sr3Config.from_mapping({"sr3.checkpoint.mode": "trident"}, strict=False)


@pytest.mark.parametrize(
    "name",
    [
        "sr3.restored",
        "sr3.snapshot",
        "sr3.error",
        "sr3.source.topic",
        "sr3.source.offset",
        "sr3.kafka.out",
        "sr3.kafka.next",
    ],
)
def test_sr3_names_that_are_no_keys_are_never_reported(
    caplog: pytest.LogCaptureFixture, name: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="sr3.config"):
        Sr3Config.from_mapping({name: 1}, strict=True)
        Sr3Config.from_mapping({name: 1}, strict=False)
    assert caplog.records == []


def test_every_key_of_the_table_is_accepted_strictly() -> None:
    conf = Sr3Config().to_mapping()
    assert set(conf) == set(KEYS)
    assert Sr3Config.from_mapping(conf, strict=True) == Sr3Config()


def test_a_configured_config_round_trips() -> None:
    config = Sr3Config.from_mapping(
        {
            "sr3.output.key.fields": ["word"],
            "sr3.kafka.topics": ["a", "b"],
            "sr3.recovery.latency.target.s": 3,
            "sr3.ring.max.shard.bytes": "1MiB",
        }
    )
    assert Sr3Config.from_mapping(config.to_mapping()) == config


def test_merged_layers_let_the_component_config_win() -> None:
    topology = {"sr3.recovery.mechanism": "star", "sr3.checkpoint.mode": "native"}
    overrides = {"sr3.recovery.mechanism": "line"}
    component = {"sr3.recovery.mechanism": "tree", "sr3.state.key.groups": 64}
    config = Sr3Config.merged(topology, overrides, component)
    assert config.recovery.mechanism == "tree"
    assert config.ring.key_group_count == 64
    assert config.checkpoint.mode == "native"


def test_the_environment_still_sets_only_cluster_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"SR3_RING_VNODES": "16", "SR3_CHECKPOINT_INTERVAL_S": "5"}
    with caplog.at_level(logging.WARNING, logger="sr3.config"):
        config = Sr3Config.from_env(env)
    assert config.ring.vnodes == 16
    assert config.checkpoint.interval_s == 1.0
    assert "SR3_CHECKPOINT_INTERVAL_S sets no sr3 config key" in caplog.text


def test_key_looks_up_a_row_or_names_the_closest() -> None:
    assert Sr3Config.key("sr3.kafka.poll.s").default == 0.05
    with pytest.raises(ConfigError, match="did you mean sr3.kafka.poll.s"):
        Sr3Config.key("sr3.kafka.pol.s")


def test_a_section_reads_only_its_own_keys() -> None:
    conf = {"sr3.checkpoint.rollback.quiet.s": 3, "sr3.ring.vnodes": "bad"}
    assert CheckpointConfig.from_mapping(conf).rollback_quiet_s == 3.0
    with pytest.raises(ConfigError, match=r"sr3\.checkpoint\.timeout\.s=0 "):
        CheckpointConfig.from_mapping({"sr3.checkpoint.timeout.s": 0})
