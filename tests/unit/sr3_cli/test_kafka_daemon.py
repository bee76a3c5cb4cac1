"""The Kafka broker launcher without a JVM: missing jars, configuration, cluster ids."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.daemons.kafka_cluster import KafkaCluster
from sr3_cli.daemons.kafka_config import BrokerInfo, new_cluster_id, server_properties
from sr3_cli.daemons.kafka_home import (
    KafkaBrokerError,
    KafkaHome,
    KafkaMissingError,
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
        cid = new_cluster_id()
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_the_broker_listens_on_loopback_only_and_creates_no_topic_itself(
    tmp_path: Path,
) -> None:
    text = server_properties(
        BrokerInfo(port=9000, controller_port=9001, cluster_id="x"), tmp_path / "data"
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


def test_a_node_of_three_joins_a_static_quorum_with_three_replicas(
    tmp_path: Path,
) -> None:
    voters = "1@127.0.0.1:9001,2@127.0.0.1:9003,3@127.0.0.1:9005"
    info = BrokerInfo(9002, 9003, "x", node_id=2, voters=voters)
    text = server_properties(info, tmp_path / "data")
    settings = dict(line.split("=", 1) for line in text.splitlines()[1:])
    assert settings["node.id"] == "2"
    assert settings["controller.quorum.voters"] == voters
    assert "controller.quorum.bootstrap.servers" not in settings
    for key in (
        "default.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert settings[key] == "3"
    assert settings["min.insync.replicas"] == "2"
    assert settings["transaction.state.log.min.isr"] == "2"


def test_a_lab_dir_keeps_its_number_of_brokers(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text('{"brokers": 3}')
    with pytest.raises(KafkaBrokerError, match="holds a Kafka cluster of 3 brokers"):
        KafkaCluster(tmp_path, brokers=5)
