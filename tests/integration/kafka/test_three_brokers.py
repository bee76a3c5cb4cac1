"""Three Kafka brokers: ``sr3 lab up --kafka-brokers 3``, a broker SIGKILL mid-run.

One lab for the module (its ZooKeeper, three ring nodes and three combined
KRaft nodes), started and stopped through the ``sr3`` command line. Topics of
``sr3 lab topic`` are replicated three times with two replicas in sync, so the
word count keeps reading and committing Kafka transactions when the leader of
its input partition dies: exact counts, each ``(word, n)`` exactly once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from sr3.config import Sr3Config
from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.lab import Lab
from sr3_cli.processes import lab_processes
from storm_bridge.runner import RunOptions
from storm_bridge.wiring import RingAccess
from tests.integration.kafka.conftest import produce
from tests.integration.kafka.test_kafka_wordcount import (
    check_exactly_once,
    conf_for,
    corpus,
    run,
)
from tests.integration.kafka.test_lab_kafka import sr3

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory, zk_server: object) -> Iterator[Lab]:
    """A lab with three ring nodes and three Kafka brokers, up and down by the CLI."""
    root = tmp_path_factory.mktemp("lab3") / "lab"
    up = sr3("lab", "up", "--dir", str(root), "--nodes", "3", "--kafka-brokers", "3")
    try:
        assert up.returncode == 0, up.stderr
        assert "3 brokers (combined KRaft)" in up.stdout
        yield Lab.load(root)
    finally:
        down = sr3("lab", "down", "--dir", str(root))
    assert down.returncode == 0, down.stderr
    assert lab_processes(root) == []  # every broker JVM stopped too


def test_status_lists_three_brokers_and_topics_survive_one(lab3: Lab) -> None:
    status = sr3("status", "--lab", str(lab3.root), "--json")
    assert status.returncode == 0, status.stderr
    kafka = json.loads(status.stdout)["kafka"]
    assert kafka["running"] is True
    addresses = kafka["bootstrap"].split(",")
    assert len(addresses) == 3
    assert [b["bootstrap"] for b in kafka["brokers"]] == addresses
    made = sr3("lab", "topic", "events", "--partitions", "2", "--dir", str(lab3.root))
    assert made.returncode == 0, made.stderr
    assert "replication factor 3" in made.stdout
    admin = AdminClient({"bootstrap.servers": kafka["bootstrap"]})
    meta = admin.list_topics("events", timeout=10).topics["events"]
    assert all(len(p.replicas) == 3 for p in meta.partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, "events")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"


def test_broker_kill_during_a_run_keeps_state_and_output_exact(lab3: Lab) -> None:
    bootstrap = str(lab3.kafka["bootstrap"]) if lab3.kafka else ""
    for name in ("lines3", "counts3"):
        made = sr3("lab", "topic", name, "--partitions", "2", "--dir", str(lab3.root))
        assert made.returncode == 0, made.stderr
    text = corpus(1000, seed=7)
    produce(bootstrap, "lines3", [t.encode() for t in text], partitions=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader = admin.list_topics("lines3", timeout=10).topics["lines3"].partitions[0]
    victim = KafkaBroker.attach(Path(lab3.root / "kafka" / f"broker-{leader.leader}"))
    # spouts of the dead leader's partition stay dry until the controller
    # fences it (3 s) and they find the new leader (a few seconds more): the
    # run must not end then (4 s was too short on a quiet machine)
    extra = {"sr3.kafka.batch.records": 20, "sr3.idle.quiet.s": 10}
    conf = conf_for(bootstrap, "lines3", "counts3", **extra)
    ring = RingAccess(lab3.config(Sr3Config()))
    # the broker leading the input's partition 0 dies while the run reads it
    killer = threading.Timer(1.5, victim.kill)
    killer.start()
    try:
        report = run(
            ring,
            lab3,
            RunOptions(until_idle=True, conf=conf, timeout_s=90.0),
        )
        killer.join()
        assert not victim.running()
        assert report.idle is True, report.errors
        check_exactly_once(ring, conf, bootstrap, text)
    finally:
        killer.cancel()
        ring.close()
