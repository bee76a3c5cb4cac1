"""The Kafka broker launcher without a JVM: missing jars, configuration, cluster ids."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sr3_cli.daemons.kafka import (
    BrokerInfo,
    KafkaBroker,
    KafkaBrokerError,
    KafkaHome,
    KafkaMissingError,
    _cluster_id,
    pinned_version,
)


def test_a_missing_jar_is_named_with_the_command_that_fetches_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(KafkaMissingError) as info:
        KafkaHome.locate(tmp_path)
    message = str(info.value)
    assert f"kafka_2.13-{pinned_version()}.jar" in message
    assert "scripts/fetch-jars.sh" in message


def test_cluster_ids_are_16_bytes_of_base64url_not_read_as_flags() -> None:
    for _ in range(200):
        cid = _cluster_id()
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_the_broker_listens_on_loopback_only_and_creates_no_topic_itself(
    tmp_path: Path,
) -> None:
    broker = KafkaBroker(tmp_path, home=KafkaHome(tmp_path, "4.1.1"))
    text = broker._properties(
        BrokerInfo(port=9000, controller_port=9001, cluster_id="x")
    )
    settings = dict(line.split("=", 1) for line in text.splitlines()[1:])
    assert settings["listeners"] == (
        "PLAINTEXT://127.0.0.1:9000,CONTROLLER://127.0.0.1:9001"
    )
    assert settings["process.roles"] == "broker,controller"
    assert settings["auto.create.topics.enable"] == "false"
    assert settings["transaction.state.log.replication.factor"] == "1"
    assert settings["log.dirs"] == str(tmp_path / "data")


def test_attach_without_a_started_broker_says_so(tmp_path: Path) -> None:
    with pytest.raises(KafkaBrokerError, match="no Kafka broker was started"):
        KafkaBroker.attach(tmp_path)
