"""Tick tuples as streamparse users handle them, with exactly-once checkpoints."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess

pytestmark = [pytest.mark.storm, pytest.mark.zk]

TOPOLOGIES = Path(__file__).parent / "topologies"


def test_ticks_a_bolt_never_acks_hold_back_neither_epochs_nor_the_end(
    lab: Lab,
) -> None:
    # ShellBolt keeps an unacked tick forever and nothing waits on it: neither
    # a checkpoint barrier nor --until-idle may wait for its ack either
    count = 1500
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={"sbt.count": count, "topology.max.spout.pending": 100},
        kills=[TaskKill("total", 0, at_s=2.0)],
        timeout_s=60.0,
    )
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_tick_flush.py", ring=ring, options=options
        )
        _, state = ring.committed_state("sbt_tick_flush", "total")
    finally:
        ring.close()
    assert report.idle is True, report.busy
    assert [r["cause"] for r in report.recoveries] == ["total:0"]
    # the only epoch given up is the one open when the task died: a task-scope
    # recovery abandons it (docs/local-recovery.md); never one waiting on a tick
    task_scope = sum(1 for r in report.recoveries if r.get("scope") == "task")
    assert report.checkpoints["abandoned"] <= task_scope
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for n in range(count):
        sums[f"k{n % 5}"] += n
        counts[f"k{n % 5}"] += 1
    expected = {key: [key, sums[key], counts[key]] for key in sums}
    assert report.outputs["total"] == {
        json.dumps([key]): values for key, values in expected.items()
    }
    assert {key[0]: [key[0], s["sum"], s["count"]] for key, s in state.items()} == (
        expected
    )
