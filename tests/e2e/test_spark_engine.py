"""The Spark engine with SR3 as its recovery core, against the Storm engine.

Real ZooKeeper, real ring node processes, the shared local[2] Spark session and
the Storm engine's local cluster with multilang subprocesses. Each test reads
committed state from the ring, as ``sr3 state dump`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.errors import SparkBridgeError
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from storm_bridge.cluster.context import assign_task_ids
from storm_bridge.runner import RunOptions
from storm_bridge.runner import run_topology as run_storm
from tests.e2e.conftest import require_zk
from tests.integration.conftest import running_lab
from topologies.wordcount import corpus
from topology_api.topology import load_topology

pytestmark = [pytest.mark.zk, pytest.mark.spark, pytest.mark.storm, pytest.mark.slow]

EXAMPLES = Path(__file__).parents[2] / "topologies"
WORDCOUNT = EXAMPLES / "wordcount.py"


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RingAccess]:
    """A 3-node lab shared by the module, and handles on it."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("spark-lab") / "lab") as lab:
        access = RingAccess(lab.config(Sr3Config.from_env()))
        try:
            yield access
        finally:
            access.close()


def dump(ring: RingAccess, topology: str, component: str) -> dict[str, Any]:
    """Return the committed state as ``sr3 state dump --json`` prints it."""
    _epoch, state = ring.committed_state(topology, component)
    return {json.dumps(list(key)): fields for key, fields in sorted(state.items())}


def expected_counts(lines: int) -> dict[str, Any]:
    words = Counter(w for line in corpus(lines, 8, 7) for w in line.split())
    return {json.dumps([w]): {"n": n} for w, n in sorted(words.items())}


def storm(
    ring: RingAccess,
    path: Path,
    conf: dict[str, Any],
    *,
    duration_s: float | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    options = RunOptions(
        until_idle=duration_s is None,
        duration_s=duration_s,
        conf={"sr3.checkpoint.interval.s": 0.3, **conf},
        resume=resume,
    )
    return run_storm(path, ring=ring, options=options).to_dict()


def spark_run(  # noqa: PLR0913 (the run's options)
    spark: SparkSession,
    ring: RingAccess,
    path: Path,
    checkpoint: Path,
    conf: dict[str, Any],
    *,
    resume: bool = False,
    stop_after_batches: int | None = None,
    rows: int = 200,
) -> dict[str, Any]:
    return run_spark(
        path,
        checkpoint_dir=checkpoint,
        spark=spark,
        ring=ring,
        conf=conf,
        max_rows_per_batch=rows,
        resume=resume,
        stop_after_batches=stop_after_batches,
    )


@pytest.mark.parametrize(
    ("name", "conf"),
    [
        ("wordcount", {"wordcount.lines": 300}),
        ("ysb", {"ysb.events": 3000, "ysb.window.ms": 500}),
        ("linear_road", {"lr.vehicles": 30, "lr.minutes": 4}),
    ],
)
def test_spark_reaches_the_storm_engines_state_and_outputs(
    spark: SparkSession,
    ring: RingAccess,
    tmp_path: Path,
    name: str,
    conf: dict[str, Any],
) -> None:
    path = EXAMPLES / f"{name}.py"
    on_storm = storm(ring, path, conf)
    assert on_storm["idle"], on_storm
    storm_state = {c: dump(ring, name, c) for c in on_storm["state"]}
    assert all(storm_state.values()), storm_state

    on_spark = spark_run(spark, ring, path, tmp_path / "ck", conf)

    assert on_spark["idle"]
    assert on_spark["engine"] == "spark"
    assert set(on_spark["state"]) == set(storm_state)
    spark_state = {c: dump(ring, name, c) for c in on_spark["state"]}
    assert spark_state == storm_state
    assert on_spark["outputs"] == on_storm["outputs"]
    assert on_spark["checkpoints"]["count"] >= 1


def test_deleted_spark_checkpoint_restores_state_from_the_ring(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    conf = {"wordcount.lines": 600}
    checkpoint = tmp_path / "ck"
    first = spark_run(
        spark, ring, WORDCOUNT, checkpoint, conf, stop_after_batches=2, rows=100
    )
    assert not first["idle"]
    assert first["checkpoints"]["count"] >= 2
    partial = dump(ring, "wordcount", "count")
    assert partial
    assert partial != expected_counts(600)

    shutil.rmtree(checkpoint)
    second = spark_run(spark, ring, WORDCOUNT, checkpoint, conf, resume=True, rows=100)

    assert second["idle"]
    assert second["started_from"].startswith("ring epoch")
    [recovery] = second["recoveries"]
    assert recovery["restored_keys"] == sum(1 for _ in partial)
    assert recovery["used"] in {"star", "line", "tree"}
    assert dump(ring, "wordcount", "count") == expected_counts(600)


def test_storm_hands_off_to_spark_and_spark_back_to_storm(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    lines = 6000
    conf = {"wordcount.lines": lines}
    partial = storm(ring, WORDCOUNT, conf, duration_s=2.0)
    record = ring.committed("wordcount")
    assert record is not None
    assert record.owners, "the Storm run committed no epoch with state"
    # None: a spout that had emitted nothing by that commit (a loaded machine's
    # first epoch may come first; seen in CI)
    emitted = [o for o in record.offsets.values() if o is not None]
    assert max(emitted, default=-1) < lines - 2, partial

    on_spark = spark_run(
        spark,
        ring,
        WORDCOUNT,
        tmp_path / "ck",
        conf,
        resume=True,
        stop_after_batches=3,
        rows=500,
    )
    assert on_spark["started_from"] == f"ring epoch {record.epoch}"
    handed = ring.committed("wordcount")
    assert handed is not None
    assert handed.extra["engine"] == "spark"
    assert handed.epoch > record.epoch

    back = storm(ring, WORDCOUNT, conf, resume=True)

    assert back["idle"]
    assert dump(ring, "wordcount", "count") == expected_counts(lines)


def test_a_spark_checkpoint_behind_the_ring_is_refused(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    conf = {"wordcount.lines": 200}
    checkpoint = tmp_path / "ck"
    spark_run(spark, ring, WORDCOUNT, checkpoint, conf)
    storm(ring, WORDCOUNT, conf)  # the ring moves on without this checkpoint

    with pytest.raises(SparkBridgeError, match="Delete the checkpoint directory"):
        spark_run(spark, ring, WORDCOUNT, checkpoint, conf, resume=True)


@pytest.mark.parametrize("engine", ["storm", "spark"])
def test_compaction_leaves_no_shard_behind(
    spark: SparkSession, ring: RingAccess, tmp_path: Path, engine: str
) -> None:
    conf = {
        "wordcount.lines": 2400,
        "sr3.checkpoint.max.chain.length": 1,
        "sr3.checkpoint.interval.s": 0.1,
    }
    if engine == "storm":
        report = storm(ring, WORDCOUNT, conf)
    else:
        report = spark_run(spark, ring, WORDCOUNT, tmp_path / "ck", conf, rows=100)
    # chain length 1: a full snapshot by the third epoch on either engine
    assert report["checkpoints"]["count"] >= 3, report["checkpoints"]
    record = ring.committed("wordcount")
    assert record is not None
    for owner in record.owners:
        latest = ring.manifests.manifest(owner, record.epoch)
        assert ring.manifests.epochs(owner) == [record.epoch]
        # every recorded shard is one the committed chain reads: older chains
        # were deleted once a full snapshot started a new one
        assert set(ring.manifests.shards(owner)) == set(latest.shard_ids)
    assert dump(ring, "wordcount", "count") == expected_counts(2400)


@pytest.mark.soak  # test_rescale_spark.py rescales across engines in make test
def test_rescaled_stateful_bolt_keeps_every_key_on_both_engines(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    lines = 6000
    conf = {"wordcount.lines": lines}
    rescaled = Path(__file__).parent / "topologies" / "rescaled" / "wordcount.py"
    storm(ring, WORDCOUNT, conf, duration_s=2.0)  # count on 3 tasks
    first = ring.committed("wordcount")
    assert first is not None
    assert len([o for o in first.owners if "/count/" in o]) == 3

    # Spark with the counter on 2 tasks (another process: the file shares
    # its module name with topologies/wordcount.py): reads 3 owners, writes 2
    secret = tmp_path / "secret"
    secret.write_text(ring.config.node.secret, encoding="utf-8")
    command = [sys.executable, "-m", "spark_bridge", str(rescaled)]
    command += ["--zk", ring.config.zk.hosts, "--chroot", ring.config.zk.chroot]
    command += ["--secret-file", str(secret), "--resume", "--max-batches", "2"]
    command += ["--checkpoint-dir", str(tmp_path / "ck"), "--max-rows-per-batch"]
    command += ["500", "--conf", f"wordcount.lines={lines}"]
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = ring.committed("wordcount")
    assert second is not None
    assert sorted(o for o in second.owners if "/count/" in o) == [
        "wordcount/count/0",
        "wordcount/count/1",
    ]

    # back on Storm with 3 tasks: each restores both owners, keeps its keys
    back = storm(ring, WORDCOUNT, conf, resume=True)

    assert back["idle"]
    assert dump(ring, "wordcount", "count") == expected_counts(lines)


SPARK_TOPOLOGIES = Path(__file__).parents[1] / "integration/spark_bridge/topologies"


def _returned_ids(report: dict[str, Any], emitter: str) -> dict[int, list[int]]:
    """Return n -> what ``emitter``'s emit of n returned, shuffled tasks as 0."""
    names = task_context_ids(SPARK_TOPOLOGIES / "sb_task_ids.py")
    found: dict[int, list[int]] = {}
    for what, ids in report["outputs"][f"{emitter}:ids"].values():
        found[int(what.split()[1])] = [
            0 if names[t] in {"relay", "shuf"} else t for t in ids
        ]
    return found


def task_context_ids(path: Path) -> dict[int, str]:
    """Return the Storm engine's task id -> component (one acker task)."""
    return assign_task_ids(load_topology(path), 1)


def test_need_task_ids_returns_what_the_storm_engine_returns(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    path = SPARK_TOPOLOGIES / "sb_task_ids.py"
    conf = {"ids.n": 8}
    on_storm = storm(ring, path, conf)
    on_spark = spark_run(spark, ring, path, tmp_path / "ck", conf, rows=4)

    assert on_storm["idle"]
    assert on_spark["idle"]
    for emitter in ("source", "relay"):
        on_both = _returned_ids(on_storm, emitter)
        assert sorted(on_both) == list(range(8))
        # same ids in the same order; a shuffle's pick is random on Storm
        assert _returned_ids(on_spark, emitter) == on_both


def test_tick_tuples_flush_stateless_and_stateful_bolts_on_both_engines(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    path = SPARK_TOPOLOGIES / "sb_ticks.py"
    # the last tick of agg must come before Storm sees the run idle
    conf = {"ticks.n": 12, "sr3.idle.quiet.s": 4}
    on_storm = storm(ring, path, conf)
    storm_total = dump(ring, "sb_ticks", "total")
    on_spark = spark_run(spark, ring, path, tmp_path / "ck", conf, rows=4)

    assert on_storm["idle"]
    assert on_spark["idle"]
    assert storm_total == {json.dumps([k]): {"total": 4} for k in range(3)}
    assert dump(ring, "sb_ticks", "total") == storm_total
    assert on_spark["outputs"]["total"] == on_storm["outputs"]["total"]
    # no tick frequency, no ticks: silent never emits on either engine
    assert not on_storm["outputs"].get("silent")
    assert not on_spark["outputs"].get("silent")
