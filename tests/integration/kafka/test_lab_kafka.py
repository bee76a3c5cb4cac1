"""`sr3 lab up --kafka`, `sr3 status --json` and `sr3 lab down` with a real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.processes import alive, lab_processes
from tests.conftest import run_sr3 as sr3

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.slow]


def test_lab_up_kafka_reports_the_broker_and_lab_down_stops_it(
    tmp_path: Path, zk_server: object
) -> None:
    root = str(tmp_path / "lab")
    up = sr3("lab", "up", "--dir", root, "--nodes", "1", "--kafka")
    try:
        assert up.returncode == 0, up.stderr
        assert "Apache Kafka" in up.stdout
        status = sr3("status", "--lab", root, "--json")
        assert status.returncode == 0, status.stderr
        kafka = json.loads(status.stdout)["kafka"]
        assert kafka["running"] is True
        bootstrap = kafka["bootstrap"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.list_topics(timeout=10).brokers  # it speaks Kafka
        made = sr3("lab", "topic", "words", "--partitions", "3", "--dir", root)
        assert made.returncode == 0, made.stderr
        assert (
            len(admin.list_topics("words", timeout=10).topics["words"].partitions) == 3
        )
        twice = sr3("lab", "topic", "words", "--dir", root)
        assert twice.returncode == 2
        assert "already exists" in twice.stderr
        again = sr3("lab", "up", "--dir", root, "--kafka")  # idempotent
        assert again.returncode == 0, again.stderr
        assert (
            json.loads((tmp_path / "lab" / "lab.json").read_text())["kafka"][
                "bootstrap"
            ]
            == bootstrap
        )
        pid = KafkaBroker.attach(Path(kafka["dir"])).pid
        assert pid is not None
    finally:
        down = sr3("lab", "down", "--dir", root)
    assert down.returncode == 0, down.stderr
    assert not alive(pid)
    assert lab_processes(tmp_path / "lab") == []
