"""Native mode: tuples of a rolled-back generation never reach restored state.

A rollback's spouts drain the trees they track, but a failed or timed-out tree
may leave tuples behind: one stalled in a stateless task, or emitted by a spout
process that died. Before every tuple carried its generation, the owners only
dropped such stragglers until a quiet time (``sr3.checkpoint.rollback.quiet.s``)
had passed without one, so a task stalled longer than that counted its tuple
on top of the restored state once it woke up. These runs stall ``normalise``
for sixteen times the quiet time, past the tree's timeout and the whole
rollback; the ledger must still end exact (it ended with every key over before
the fix).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess
from tests.conftest import load_module
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "sbt_orders.py"
ORDERS = 300
QUIET_S = 0.5
CONF: dict[str, Any] = {
    "sbt.orders": ORDERS,
    "sr3.checkpoint.mode": "native",
    "sr3.checkpoint.interval.s": 0.3,
    "sr3.checkpoint.rollback.quiet.s": QUIET_S,
    "topology.max.spout.pending": 20,
    "sr3.idle.quiet.s": 0.5,
}


def _topology_module() -> ModuleType:
    module = load_module(TOPOLOGY, "sbt_orders_fencing")
    return module


EXPECTED = _topology_module().expected_ledger(ORDERS)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, zk_server: object) -> Iterator[Lab]:
    """A lab of three ring nodes (``zk_server`` only skips without ZooKeeper)."""
    with running_lab(tmp_path_factory.mktemp("native-fencing") / "lab") as running:
        yield running


@pytest.fixture
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config()))
    yield access
    access.close()


def _ledger(ring: RingAccess) -> dict[tuple[Any, ...], dict[str, Any]]:
    _epoch, state = ring.committed_state("sbt_orders", "ledger")
    return {tuple(k): dict(v) for k, v in state.items()}


def test_a_tuple_stalled_past_the_quiet_time_is_fenced(
    ring: RingAccess, tmp_path: Path
) -> None:
    conf = {
        **CONF,
        "topology.message.timeout.secs": 1,
        "sbt.slow_at": "o40",
        # trees expire after 1 to 2 s; the stall outlasts the rollback and its
        # quiet time, so the stalled tuples land after the spouts resumed
        "sbt.slow_s": 8.0,
        "sbt.out_dir": str(tmp_path),
    }
    report = run_topology(
        TOPOLOGY,
        ring=ring,
        options=RunOptions(until_idle=True, conf=conf, timeout_s=90.0),
    )
    assert report.idle is True, report.busy
    assert (tmp_path / "slowed").exists()
    assert report.checkpoints["rollbacks"] >= 1
    assert _ledger(ring) == EXPECTED
