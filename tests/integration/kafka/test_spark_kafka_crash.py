"""A Spark driver SIGKILLed between a micro-batch's epoch commit and its Kafka write.

The driver (a subprocess running ``python -m spark_bridge`` on ``local[2]``)
kills itself with SIGKILL once micro-batch 1 committed its SR3 epoch, before
that batch's Kafka transaction (the test-only ``SR3_CRASH_POINT``). The batch's
outputs are in the committed epoch (owner ``kafka_wordcount/results/spark``);
a run resuming from the ring writes them before it starts (a Spark run with a
FRESH Spark checkpoint, or a Storm run on the local cluster), and the output
topic read ``read_committed`` holds each ``(word, n)`` exactly once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.kafka_sink import CRASH_ENV
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions
from storm_bridge.runner import run_topology as run_storm
from tests.integration.kafka.conftest import (
    NewTopicFactory,
    assert_each_count_once,
    produce,
    read_all,
    topology_file,
)
from tests.integration.kafka.test_kafka_wordcount import corpus
from tests.integration.spark_bridge.test_standalone import REPO_ROOT, _driver_env

pytestmark = [pytest.mark.kafka, pytest.mark.zk, pytest.mark.spark, pytest.mark.slow]

FILE = topology_file("kafka_wordcount.py")
ROWS_PER_BATCH = 200  # 600 lines: 3 micro-batches, the crash after the 2nd's commit


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def crash_spark_after_commit(
    lab: Lab, ring: RingAccess, bootstrap: str, topics: tuple[str, str], tmp_path: Path
) -> tuple[list[str], dict[str, str]]:
    """Run the word count on a Spark driver SIGKILLed after batch 1's epoch commit.

    ``topics`` are the (empty) input and output topics. Returns the lines
    produced and the conf of the run; asserts the batch committed and that its
    outputs did not reach Kafka.
    """
    lines, counts = topics
    text = corpus(600, seed=13)
    produce(bootstrap, lines, [t.encode() for t in text], partitions=2)
    conf = {
        "sr3.kafka.bootstrap": bootstrap,
        "sr3.kafka.topics": lines,
        "sr3.kafka.sink.topic": counts,
    }
    log = tmp_path / "driver.log"
    command = [
        sys.executable, "-m", "spark_bridge", str(FILE),
        "--master", "local[2]", "--checkpoint-dir", str(tmp_path / "first"),
        "--zk", lab.zk_hosts, "--chroot", lab.chroot,
        "--secret-file", str(lab.secret_file),
        "--max-rows-per-batch", str(ROWS_PER_BATCH),
        *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
    ]  # fmt: skip
    with log.open("wb") as stderr:
        crashed = subprocess.run(  # noqa: S603 (this interpreter, fixed arguments)
            command,
            cwd=REPO_ROOT,
            env={**_driver_env(), CRASH_ENV: "after-commit:1"},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=280,
            check=False,
        )
    tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
    assert crashed.returncode == -signal.SIGKILL, tail
    # batch 1 committed, and its outputs did not reach Kafka
    record = ring.committed("kafka_wordcount")
    assert record is not None
    assert record.extra.get("batch") == 1, record
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    committed = {k[0]: v["n"] for k, v in state.items()}
    seen = {(r["word"], r["count"]) for r in read_all(bootstrap, counts)}
    owed = {(w, n) for w, t in committed.items() for n in range(1, t + 1)}
    assert seen < owed
    return text, conf


def assert_each_output_once(
    ring: RingAccess, bootstrap: str, counts: str, text: list[str]
) -> None:
    """The committed counts are exact and ``counts`` holds every ``(word, n)`` once."""
    expected = Counter(w for line in text for w in line.split())
    _epoch, state = ring.committed_state("kafka_wordcount", "count")
    assert {k[0]: v["n"] for k, v in state.items()} == dict(expected)
    assert_each_count_once(bootstrap, counts, expected)


@pytest.mark.parametrize("engine", ["spark", "storm"])
def test_spark_driver_killed_before_the_kafka_write_loses_no_output_on_resume(
    engine: str,
    spark: SparkSession,
    lab: Lab,
    ring: RingAccess,
    kafka_bootstrap: str,
    new_topic: NewTopicFactory,
    tmp_path: Path,
) -> None:
    counts = new_topic("counts", 2)
    text, conf = crash_spark_after_commit(
        lab, ring, kafka_bootstrap, (new_topic("lines", 2), counts), tmp_path
    )

    if engine == "spark":
        # resumed from the ring, with a fresh Spark checkpoint
        report = run_spark(
            FILE,
            checkpoint_dir=tmp_path / "second",
            spark=spark,
            ring=ring,
            conf=conf,
            max_rows_per_batch=ROWS_PER_BATCH,
            resume=True,
        )
        assert report["idle"] is True
        assert report["started_from"].startswith("ring epoch")
    else:
        # a Storm run on the local cluster takes over from Spark's epoch
        options = RunOptions(until_idle=True, conf=conf, resume=True, timeout_s=180)
        resumed = run_storm(FILE, ring=ring, options=options)
        assert resumed.idle is True, resumed.errors

    assert_each_output_once(ring, kafka_bootstrap, counts, text)
