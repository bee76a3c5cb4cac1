"""Kafka word count on a standalone Spark cluster, an executor SIGKILLed mid-query.

``topologies/kafka_wordcount.py`` runs in a driver subprocess (``python -m
spark_bridge``) against a real master and worker, with a ring and the session's
Kafka broker. Once the first micro-batch committed, every executor of the
worker is SIGKILLed; the worker launches a new one and Spark re-runs the lost
tasks. The committed counts are exact and the output topic, read
``read_committed``, holds each ``(word, n)`` once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from spark_bridge.standalone import StandaloneCluster
from sr3_cli.lab import Lab
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    assert_each_count_once,
    produce,
    topology_file,
)
from tests.integration.kafka.test_kafka_wordcount import corpus
from tests.integration.spark_bridge.test_standalone import (
    REPO_ROOT,
    _alive,
    _commits,
    _driver_env,
    _wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.spark, pytest.mark.slow]

FILE = topology_file("kafka_wordcount.py")
LINES = 1200
ROWS_PER_BATCH = 200  # 6 micro-batches: the kill lands after the first


def test_kafka_wordcount_survives_a_killed_executor_exactly_once(
    standalone_cluster: StandaloneCluster,
    lab: Lab,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    tmp_path: Path,
) -> None:
    cluster = standalone_cluster
    lines, counts = new_topic("lines", 2), new_topic("counts", 2)
    text = corpus(LINES, seed=21)
    produce(kafka_bootstrap, lines, [t.encode() for t in text], partitions=2)
    checkpoint = tmp_path / "ckpt"
    stderr_path = tmp_path / "driver.log"
    command = [
        sys.executable, "-m", "spark_bridge", str(FILE),
        "--master", cluster.url, "--checkpoint-dir", str(checkpoint), "--state",
        "--zk", lab.zk_hosts, "--chroot", lab.chroot,
        "--secret-file", str(lab.secret_file),
        "--conf", f"sr3.kafka.bootstrap={kafka_bootstrap}",
        "--conf", f"sr3.kafka.topics={lines}",
        "--conf", f"sr3.kafka.sink.topic={counts}",
        "--max-rows-per-batch", str(ROWS_PER_BATCH),
    ]  # fmt: skip
    with stderr_path.open("wb") as stderr:
        driver = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=_driver_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        _wait_for(
            lambda: _commits(checkpoint) >= 1 or driver.poll() is not None,
            timeout_s=180,
            what="the first committed micro-batch",
            log=stderr_path,
        )
        committed_at_kill = _commits(checkpoint)
        victims = cluster.executor_pids()
        assert victims, "no executor of this worker to kill"
        killed_at = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        replacement = _wait_for(
            lambda: [p for p in cluster.executor_pids() if p not in victims],
            timeout_s=60,
            what="the worker to launch a new executor",
            log=cluster.log_path("worker"),
        )
        replaced_s = time.monotonic() - killed_at
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    log = stderr_path.read_text(encoding="utf-8", errors="replace")
    assert driver.returncode == 0, log[-3000:]
    assert not any(_alive(pid) for pid in victims)
    assert replacement
    # the kill landed mid-query: batches were still to come
    assert 1 <= committed_at_kill < _commits(checkpoint)
    report = json.loads(out)
    print(  # noqa: T201 (the figures docs/kafka.md quotes)
        "executor kill:",
        json.dumps(
            {
                "seconds": report["seconds"],
                "session_start_s": report["session_start_s"],
                "tuples_per_s": report["throughput"]["tuples_per_s"],
                "batches": report["batches"],
                "latency_ms": report["micro_batches"]["latency_ms"],
                "replacement_executor_s": round(replaced_s, 1),
                "committed_at_kill": committed_at_kill,
            }
        ),
    )
    assert report["master"] == cluster.url
    assert report["idle"] is True
    expected = Counter(w for line in text for w in line.split())
    # the ring's committed state, as `sr3 state dump --json` shows it
    assert report["final_state"]["count"] == {
        json.dumps([w]): {"n": n} for w, n in sorted(expected.items())
    }
    assert_each_count_once(kafka_bootstrap, counts, expected)
