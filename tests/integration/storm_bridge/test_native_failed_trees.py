"""Native mode: a failed tree never changes the state's exactly-once effect.

A topology with a join, a stateless bolt behind a shuffle and a non-idempotent
ledger runs in ``sr3.checkpoint.mode=native`` (as on a real Storm cluster).
Whatever task dies holding tuples, stateless or stateful, spout or bolt, and
when a tree times out, the committed ledger ends exactly as without failures.
Each case runs a few rounds with different kill times: the lost update showed
in 2 of 7 runs before trees were rolled back instead of replayed by the spout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, RunReport, TaskKill, run_topology
from storm_bridge.wiring import RingAccess
from tests.conftest import load_module
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "sbt_orders.py"
ORDERS = 500
ROUNDS_AT_S = (1.0, 1.6, 2.2)
CONF: dict[str, Any] = {
    "sbt.orders": ORDERS,
    "sr3.checkpoint.mode": "native",
    "sr3.checkpoint.interval.s": 0.3,
    "topology.max.spout.pending": 20,
    # a run ends once its spouts were dry 0.5 s, not 2 s: they never pause, and a
    # native run also needs two commits in a row at the same offsets to end
    "sr3.idle.quiet.s": 0.5,
}


def _topology_module() -> ModuleType:
    module = load_module(TOPOLOGY, "sbt_orders_expected")
    return module


EXPECTED = _topology_module().expected_ledger(ORDERS)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, zk_server: object) -> Iterator[Lab]:
    """A lab of three ring nodes (``zk_server`` only skips without ZooKeeper)."""
    with running_lab(tmp_path_factory.mktemp("native-trees") / "lab") as running:
        yield running


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def _run(ring: RingAccess, options: RunOptions) -> RunReport:
    report = run_topology(TOPOLOGY, ring=ring, options=options)
    assert report.idle is True, report.busy
    return report


def _ledger(ring: RingAccess) -> dict[tuple[Any, ...], dict[str, Any]]:
    _epoch, state = ring.committed_state("sbt_orders", "ledger")
    return {tuple(k): dict(v) for k, v in state.items()}


@pytest.mark.parametrize(
    ("component", "index"),
    [("normalise", 0), ("ledger", 1), ("join", 0), ("orders", 1), ("payments", 0)],
    ids=[
        "stateless-task",
        "stateful-ledger",
        "stateful-join",
        "spout",
        "coordinating-spout",
    ],
)
def test_a_killed_task_leaves_the_ledger_exact(
    ring: RingAccess, component: str, index: int
) -> None:
    for at_s in ROUNDS_AT_S:
        options = RunOptions(
            until_idle=True,
            conf=CONF,
            timeout_s=90.0,
            kills=[TaskKill(component, index, at_s=at_s)],
        )
        report = _run(ring, options)
        assert report.counters[component]["restarts"] == 1, at_s
        assert _ledger(ring) == EXPECTED, f"kill {component}:{index}@{at_s}"


def test_a_timed_out_tree_leaves_the_ledger_exact(
    ring: RingAccess, tmp_path: Path
) -> None:
    for round_no, slow_at in enumerate(("o40", "o151", "o263")):
        out = tmp_path / f"round-{round_no}"
        out.mkdir()
        conf = {
            **CONF,
            "topology.message.timeout.secs": 1,
            "sbt.slow_at": slow_at,
            # a stall longer than the timeout (trees expire after 1 to 2 s) and
            # shorter than the quiet time a rollback waits for stragglers
            "sbt.slow_s": 2.2,
            "sr3.checkpoint.rollback.quiet.s": 2.0,
            "sbt.out_dir": str(out),
        }
        report = _run(ring, RunOptions(until_idle=True, conf=conf, timeout_s=90.0))
        assert (out / "slowed").exists()
        assert report.errors == []
        assert report.task_failures == []  # nothing died: the tree timed out
        assert report.checkpoints["rollbacks"] >= 1, slow_at
        assert _ledger(ring) == EXPECTED, f"timeout at {slow_at}"
