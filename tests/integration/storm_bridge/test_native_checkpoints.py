"""Native checkpoint mode: epochs coordinated by the tasks through ZooKeeper.

The local cluster runs without its coordinator (no barriers, no global rollback
by the cluster), as a real Storm cluster would: the replayable spouts and the
stateful counter run the protocol of :mod:`storm_bridge.native` on their own.
Runs use a lab of three ring nodes; the committed state (read back from the
ring) must be the exact word counts, with and without a SIGKILLed counter task.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess
from tests.integration.conftest import running_lab
from topology_api.topology import load_topology

pytestmark = [pytest.mark.zk, pytest.mark.storm]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
CONF: dict[str, Any] = {
    "wordcount.lines": 3000,
    "wordcount.words.per.line": 6,
    "wordcount.seed": 5,
    "sr3.checkpoint.mode": "native",
    "sr3.checkpoint.interval.s": 0.3,
    # a run ends once its spouts were dry 0.5 s, not 2 s: they never pause, and a
    # native run also needs two commits in a row at the same offsets to end
    "sr3.idle.quiet.s": 0.5,
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, zk_server: object) -> Iterator[Lab]:
    """A lab of three ring nodes (``zk_server`` only skips without ZooKeeper)."""
    with running_lab(tmp_path_factory.mktemp("native-lab") / "lab") as running:
        yield running


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def true_counts() -> dict[tuple[Any, ...], dict[str, Any]]:
    """Count per word, straight from the spout's corpus generator."""
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    counts = Counter(w for line in module.corpus_from_conf(CONF) for w in line.split())
    return {(word,): {"n": n} for word, n in counts.items()}


def committed_counts(ring: RingAccess) -> dict[tuple[Any, ...], dict[str, Any]]:
    _epoch, state = ring.committed_state("wordcount", "count")
    return {tuple(k): dict(v) for k, v in state.items()}


def test_native_checkpoints_advance_to_the_exact_counts(ring: RingAccess) -> None:
    options = RunOptions(until_idle=True, conf=CONF, timeout_s=60.0)
    report = run_topology(WORDCOUNT, ring=ring, options=options)
    assert report.idle is True
    assert report.errors == []
    checkpoints = report.checkpoints
    assert checkpoints["mode"] == "native"
    assert checkpoints["count"] >= 2
    assert checkpoints["rollbacks"] == 0
    record = ring.committed("wordcount")
    assert record is not None
    assert record.extra["mode"] == "native"
    assert sorted(record.owners) == [f"wordcount/count/{i}" for i in range(3)]
    assert set(record.offsets) == {"lines/0", "lines/1"}
    assert committed_counts(ring) == true_counts()


@pytest.mark.parametrize(
    ("component", "index"),
    [("count", 1), ("lines", 0)],
    ids=["stateful-task", "coordinating-spout"],
)
def test_native_rollback_after_a_killed_task_is_exact(
    ring: RingAccess, component: str, index: int
) -> None:
    options = RunOptions(
        until_idle=True,
        conf=CONF,
        timeout_s=60.0,
        kills=[TaskKill(component, index, at_s=1.5)],
    )
    report = run_topology(WORDCOUNT, ring=ring, options=options)
    assert report.idle is True
    assert report.counters[component]["restarts"] == 1
    assert report.checkpoints["rollbacks"] >= 1
    assert report.checkpoints["count"] >= 2
    assert committed_counts(ring) == true_counts()
