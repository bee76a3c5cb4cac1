"""``sr3 rebalance`` of a run on the Spark engine: a controlled restart, exactly once.

A word count (``topologies/spark_rebalance.py``) runs on the shared local[2]
Spark session in a thread of the test, as ``sr3 run --engine spark`` would in
another shell, with a ring (real ZooKeeper and ring node processes). Its spout
emits only what the test lets it (a gate file), so the test knows each
micro-batch: lines 0-299 (let through before the query starts, so its first
batch holds them), the restart to 3 tasks (the new query's first batch
restores the state), lines 300-599, the restart to 1 task, lines 600-1499,
and ``--max-batches`` ends the run after those 5.
``sr3 rebalance`` runs as a user runs it (the CLI, a subprocess). Bad
requests are refused, by the CLI and by the run, and change nothing. The
committed state, the sink's state rows and the run's outputs must equal the
true counts, as a failure-free, never-rebalanced run computes them.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.runner import final_state
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from tests.conftest import WaitUntil
from tests.e2e.conftest import require_zk, sr3, sr3_json
from tests.e2e.topologies.rebalance_parts import corpus
from tests.integration.conftest import running_lab
from zk.rebalances import REFUSED, ZkRebalanceStore

pytestmark = [pytest.mark.zk, pytest.mark.spark, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "spark_rebalance.py"
NAME = "spark_rebalance"
LINES = 1500
TRUE_COUNTS = Counter(w for line in corpus(LINES) for w in line.split())
#: lines, restart, lines, restart, lines
BATCHES = 5


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("rebalance-spark-lab") / "lab") as lab:
        yield lab


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config.from_env()))
    try:
        yield access
    finally:
        access.close()


def allow(gates: Path, lines: int) -> None:
    """Let the spout emit up to ``lines`` lines."""
    staged = gates / ".lines"
    staged.write_text(str(lines), encoding="utf-8")
    staged.replace(gates / "lines")


def committed_through(ring: RingAccess, line: int) -> bool:
    """Whether the ring's committed epoch holds the spout past ``line``."""
    record = ring.committed(NAME)
    return record is not None and record.offsets.get("lines/0") == line


def rebalance(lab: Lab, *targets: str) -> dict[str, Any]:
    """``sr3 rebalance NAME -e ... --json``; return the done request's result."""
    argv = ["rebalance", NAME, "-w", "180"]
    for target in targets:
        argv += ["-e", target]
    out = sr3_json(lab, *argv)
    assert out["engine"] == "spark", out
    assert "controlled restart" in out["note"], out
    assert out["request"]["state"] == "done", out
    return dict(out["request"]["result"])


def refused(lab: Lab, *argv: str) -> str:
    proc = sr3(lab, "rebalance", NAME, *argv, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stderr


def tasks(lab: Lab) -> int:
    run = sr3_json(lab, "status")["runs"][NAME]
    return int(run["components"]["count"]["tasks"])


def test_spark_word_count_rebalanced_2_3_1_while_running_stays_exact(  # noqa: PLR0915 (one run, every check)
    spark: SparkSession,
    lab: Lab,
    ring: RingAccess,
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    checkpoint = tmp_path / "ck"
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["report"] = run_spark(
                TOPOLOGY,
                checkpoint_dir=checkpoint,
                spark=spark,
                ring=ring,
                conf={"rebal.lines": LINES, "rebal.gates": str(gates)},
                max_rows_per_batch=100_000,
                until_idle=False,
                stop_after_batches=BATCHES,
            )
        except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
            result["error"] = exc

    allow(gates, 300)
    thread = threading.Thread(target=run, name="spark-run", daemon=True)
    thread.start()
    try:
        live = wait_until(
            lambda: sr3_json(lab, "status")["runs"].get(NAME),
            timeout_s=120,
            what="the Spark run's live record",
        )
        assert live["engine"] == "spark"
        assert live["components"]["count"] == {"tasks": 2, "stateful": True, "max": 256}
        wait_until(lambda: committed_through(ring, 299), timeout_s=120, what="batch 1")
        first = ring.committed(NAME)

        # bad requests: the CLI refuses them before writing anything ...
        assert "1..256 tasks" in refused(lab, "-e", "count=257")
        assert "is stateless" in refused(lab, "-e", "split=2")
        # ... and the run refuses one written past the CLI, with the message
        store = ZkRebalanceStore(ring.session)
        bad = store.request(NAME, {"count": 0})
        done = wait_until(
            lambda: (
                (found := store.get(NAME)) is not None
                and found[0].request_id == bad.request_id
                and found[0].state == REFUSED
                and found[0]
            ),
            timeout_s=60,
            what="the run to refuse count=0",
        )
        assert "1..256 tasks" in done.detail
        assert tasks(lab) == 2
        assert sr3_json(lab, "status")["runs"][NAME]["rebalances"] == 0
        assert ring.committed(NAME) == first

        up = rebalance(lab, "count=3")
        assert tasks(lab) == 3
        allow(gates, 600)
        wait_until(lambda: committed_through(ring, 599), timeout_s=120, what="batch 3")
        down = rebalance(lab, "count=1")
        assert tasks(lab) == 1
        allow(gates, LINES)
        thread.join(300)
    finally:
        allow(gates, LINES)
        thread.join(300)
    assert "error" not in result, result.get("error")
    report = result["report"]
    entries = report["rebalances"]
    assert [
        {c: (t["from"], t["to"]) for c, t in e["targets"].items()} for e in entries
    ] == [{"count": (2, 3)}, {"count": (3, 1)}]
    assert [e["id"] for e in entries] == [up["id"], down["id"]]
    for entry in entries:
        assert entry["phase"] == "done"
        assert entry["end_s"] >= entry["switch_s"] >= entry["start_s"]
        assert entry["bytes_moved"] > 0
        assert entry["longest_key_pause_s"] > 0
        assert entry["epoch"] is not None
    assert report["checkpoints"]["count"] == BATCHES
    # the live record went with the run
    assert NAME not in sr3_json(lab, "status")["runs"]

    truth = {json.dumps([w]): {"n": n} for w, n in sorted(TRUE_COUNTS.items())}
    _epoch, state = ring.committed_state(NAME, "count")
    assert {json.dumps(list(k)): v for k, v in state.items()} == truth
    assert final_state(checkpoint, "count") == truth
    record = ring.committed(NAME)
    assert record is not None
    assert sorted(o for o in record.owners if "/count/" in o) == [f"{NAME}/count/0"]
    outputs = report["outputs"]
    last = next(iter(outputs.values()))
    assert {json.loads(k)[0]: v[1] for k, v in last.items()} == dict(TRUE_COUNTS)
