"""Tuples a stateful bolt fails are replayed: exactly-once holds through a raise."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess

pytestmark = [pytest.mark.storm, pytest.mark.zk]

TOPOLOGIES = Path(__file__).parent / "topologies"


def test_a_tuple_whose_process_raised_once_is_counted_exactly_once(
    lab: Lab, out_dir: Path
) -> None:
    # on Storm the failed tree goes back to its spout and is replayed; local
    # checkpoints replay it by a rollback to the last committed epoch
    count = 1200
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={
            "sbt.count": count,
            "sbt.raise_at": 700,
            "sbt.out_dir": str(out_dir),
            "sr3.idle.quiet.s": 0.5,  # not 2 s: the spout never pauses
        },
        timeout_s=60.0,
    )
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_raise_once.py", ring=ring, options=options
        )
        _, state = ring.committed_state("sbt_raise_once", "total")
    finally:
        ring.close()
    assert (out_dir / "raised").exists()
    assert report.idle is True, report.busy
    assert report.task_failures == []  # the task kept running
    assert report.counters["total"]["failed"] == 1
    (recovery,) = report.recoveries
    assert recovery["cause"].endswith(" failed a tuple")
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for n in range(count):
        sums[f"k{n % 4}"] += n
        counts[f"k{n % 4}"] += 1
    expected = {key: [key, sums[key], counts[key]] for key in sums}
    assert report.outputs["total"] == {
        json.dumps([key]): values for key, values in expected.items()
    }
    assert {key[0]: [key[0], s["sum"], s["count"]] for key, s in state.items()} == (
        expected
    )
