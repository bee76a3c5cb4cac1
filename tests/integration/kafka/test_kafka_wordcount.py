"""Kafka word count on the local cluster: exact state and exactly-once output.

``topologies/kafka_wordcount.py`` reads lines from a topic, counts words in a
stateful bolt and writes every new count ``(word, n)`` through ``KafkaSink``.
"Exactly once" for this running-count stream means: read with
``read_committed``, the output topic holds each pair ``(word, n)`` for
``n = 1 .. final count of word`` exactly once (none missing, none twice),
whatever tasks or ring nodes died and however often the topology rolled back.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3.errors import SR3Error
from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.lab import Lab
from storm_bridge.kafka import deliver_committed
from storm_bridge.runner import NodeKill, RunOptions, RunReport, TaskKill, run_topology
from storm_bridge.wiring import RingAccess
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    produce,
    read_all,
    topology_file,
)
from topology_api.topology import load_topology

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

FILE = topology_file("kafka_wordcount.py")
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def corpus(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)  # noqa: S311 (test data)
    return [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(lines)]


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def conf_for(bootstrap: str, lines: str, counts: str, **extra: Any) -> dict[str, Any]:
    return {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
        "sr3.checkpoint.interval.s": 0.3,
        **extra,
    }


def check_exactly_once(
    ring: RingAccess, conf: dict[str, Any], bootstrap: str, text: list[str]
) -> None:
    """Exact committed counts, and every (word, n) in the output exactly once."""
    expected = Counter(w for line in text for w in line.split())
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    assert {k[0]: v["n"] for k, v in state.items()} == dict(expected)
    # the run wrote the last epoch once its tasks stopped: nothing is pending
    topology = load_topology(FILE)
    full = {**topology.config, **conf, "topology.name": topology.name}
    before = read_all(bootstrap, conf["sr3.kafka.sink.topic"])
    deliver_committed(full, ring=ring, component="results", tasks=2)
    out = read_all(bootstrap, conf["sr3.kafka.sink.topic"])
    assert len(out) == len(before)
    pairs = Counter((r["word"], r["count"]) for r in out)
    twice = {p: n for p, n in pairs.items() if n > 1}
    assert twice == {}
    want = {(w, n) for w, total in expected.items() for n in range(1, total + 1)}
    assert set(pairs) == want


def feed(bootstrap: str, topic: str, text: list[str], parts: int) -> threading.Thread:
    """Produce ``text`` in 10 batches while the topology runs."""

    def run() -> None:
        step = len(text) // 10
        for i in range(0, len(text), step):
            produce(
                bootstrap,
                topic,
                [t.encode() for t in text[i : i + step]],
                partitions=parts,
            )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run(ring: RingAccess, lab: Lab, options: RunOptions) -> RunReport:
    return run_topology(
        FILE, ring=ring, options=options, kill_node=lambda n: lab.kill_nodes([n])
    )


def test_local_mode_task_and_ring_node_kills_keep_output_exactly_once(
    lab: Lab, ring: RingAccess, kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    text = corpus(3000, seed=1)
    conf = conf_for(kafka_bootstrap, lines, counts)
    feeder = feed(kafka_bootstrap, lines, text, 2)
    report = run(
        ring,
        lab,
        RunOptions(
            until_idle=True,
            conf=conf,
            timeout_s=120.0,
            kills=[TaskKill("count", 1, at_s=2.0)],
            node_kills=[NodeKill("node-2", at_s=3.5)],
        ),
    )
    feeder.join()
    assert report.idle is True, report.errors
    assert report.counters["count"]["restarts"] >= 1
    assert len(report.recoveries) >= 1
    check_exactly_once(ring, conf, kafka_bootstrap, text)


def test_native_mode_sink_task_kill_keeps_output_exactly_once(
    lab: Lab, ring: RingAccess, kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    text = corpus(3000, seed=2)
    conf = conf_for(kafka_bootstrap, lines, counts, **{"sr3.checkpoint.mode": "native"})
    feeder = feed(kafka_bootstrap, lines, text, 2)
    report = run(
        ring,
        lab,
        RunOptions(
            until_idle=True,
            conf=conf,
            timeout_s=120.0,
            kills=[TaskKill("results", 0, at_s=2.5)],
        ),
    )
    feeder.join()
    assert report.idle is True, report.errors
    assert report.counters["results"]["restarts"] == 1
    assert report.checkpoints["rollbacks"] >= 1
    check_exactly_once(ring, conf, kafka_bootstrap, text)


def test_broker_down_at_start_and_during_a_run_loses_nothing(
    kafka_broker: KafkaBroker,
    lab: Lab,
    ring: RingAccess,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    wait_until: Any,
) -> None:
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    first, second = corpus(800, seed=3), corpus(800, seed=4)
    produce(kafka_bootstrap, lines, [t.encode() for t in first], partitions=2)
    # spouts read nothing while Kafka is down, as at the end of their input: the
    # run must not end as idle then. They say they wait for the broker, so the
    # quiet period need not outlast an outage (it had to be 60 s before they
    # did); it covers only the dry spells the test makes with the broker up:
    # from the first half's last record to the kill that follows its commit
    conf = conf_for(kafka_bootstrap, lines, counts, **{"sr3.idle.quiet.s": 15})
    watcher = RingAccess(lab.config(Sr3Config()))
    reports: list[RunReport] = []
    kafka_broker.kill()
    try:
        thread = threading.Thread(
            target=lambda: reports.append(
                run(ring, lab, RunOptions(until_idle=True, conf=conf, timeout_s=240))
            ),
            daemon=True,
        )
        thread.start()

        def committed_epoch() -> int:
            record = watcher.committed("kafka_wordcount")
            return -1 if record is None else record.epoch

        # the topology runs and commits epochs while the broker is down
        wait_until(lambda: committed_epoch() >= 3, timeout_s=60, what="epochs")
        kafka_broker.start()
        want = Counter(w for line in first for w in line.split())

        def counted() -> dict[str, int]:
            try:
                _e, state = watcher.committed_state("kafka_wordcount", "count")
            except SR3Error:
                return {}
            return {k[0]: v["n"] for k, v in state.items()}

        wait_until(lambda: counted() == dict(want), timeout_s=60, what="first half")
        kafka_broker.kill()  # down during the run
        down_at = committed_epoch()
        wait_until(
            lambda: committed_epoch() >= down_at + 3, timeout_s=60, what="epochs"
        )
        kafka_broker.start()
        produce(kafka_bootstrap, lines, [t.encode() for t in second], partitions=2)
        thread.join(240)
    finally:
        watcher.close()
        if not kafka_broker.running():
            kafka_broker.start()
    assert reports, "the run did not end within 240 s"
    assert reports[0].idle is True, reports[0].errors
    check_exactly_once(ring, conf, kafka_bootstrap, first + second)
