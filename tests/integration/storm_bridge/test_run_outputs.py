"""``run_topology`` reports the last output per key of each sink.

The first run has ZooKeeper (the runner watches ring membership) but no
checkpoints, so no ring node is needed: the stateful counter keeps its state in
memory. The second runs on a lab of ring nodes and kills a counter task: after
the rollback, replayed emits overwrite the aborted epoch's, so the last output
per key is again the exact final count.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3.config import Sr3Config, ZkConfig
from sr3_cli.lab import Lab
from storm_bridge.errors import StormBridgeError
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

pytestmark = [pytest.mark.zk, pytest.mark.storm]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
CONF = {
    "wordcount.lines": 1500,
    "wordcount.words.per.line": 6,
    "wordcount.seed": 11,
    "sr3.idle.quiet.s": 0.5,  # dry 0.5 s, not 2 s, ends a run: the spout never pauses
}


@pytest.fixture
def ring(zk_config: ZkConfig) -> Iterator[RingAccess]:
    access = RingAccess(Sr3Config(zk=zk_config))
    yield access
    access.close()


def expected_counts() -> dict[str, list[object]]:
    """Final count per word, straight from the spout's corpus generator."""
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    lines = module.corpus_from_conf(CONF)
    counts = Counter(word for line in lines for word in line.split())
    return {json.dumps([word]): [word, n] for word, n in sorted(counts.items())}


def test_outputs_hold_the_final_count_of_every_word(ring: RingAccess) -> None:
    options = RunOptions(until_idle=True, checkpoints=False, conf=CONF, timeout_s=60.0)
    report = run_topology(WORDCOUNT, ring=ring, options=options)
    assert report.idle is True
    assert report.errors == []
    outputs = report.to_dict()["outputs"]
    assert list(outputs) == ["count"]  # the only sink
    assert outputs["count"] == expected_counts()
    assert list(outputs["count"]) == sorted(outputs["count"])
    json.dumps(report.to_dict())  # what `sr3 run --json` prints


@pytest.mark.slow
def test_outputs_after_a_rollback_are_the_final_counts(lab: Lab) -> None:
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={**CONF, "sr3.checkpoint.interval.s": 0.2},
        kills=[TaskKill("count", 0, at_s=1.0)],
        timeout_s=60.0,
    )
    try:
        report = run_topology(WORDCOUNT, ring=ring, options=options)
    finally:
        ring.close()
    assert report.idle is True
    (recovery,) = report.recoveries
    assert recovery["cause"] == "count:0"
    # rolled-back tuples are emitted again (how many depends on where the kill
    # lands): the last output per key still is the final count
    words = sum(values[1] for values in expected_counts().values())
    assert report.counters["count"]["emitted"] >= words
    assert report.outputs["count"] == expected_counts()


def test_a_task_that_dies_at_start_is_reported_with_its_exception(
    ring: RingAccess,
) -> None:
    # the spout cannot parse its conf: the report names the exception, not only
    # the exit status, so the user sees what to fix without reading task logs
    options = RunOptions(
        until_idle=True,
        checkpoints=False,
        conf={**CONF, "wordcount.lines": "abc"},
        timeout_s=3.0,
    )
    report = run_topology(WORDCOUNT, ring=ring, options=options)
    assert report.idle is False
    assert report.errors
    assert all("component 'lines'" in e for e in report.errors)
    assert any(
        "ValueError: invalid literal for int() with base 10: 'abc'" in e
        for e in report.errors
    )


def test_a_kill_after_the_end_of_the_run_is_refused(ring: RingAccess) -> None:
    # the run would otherwise wait for the kill, far beyond --duration
    options = RunOptions(
        duration_s=1.0, conf=CONF, kills=[TaskKill("count", 0, at_s=20.0)]
    )
    with pytest.raises(StormBridgeError) as info:
        run_topology(WORDCOUNT, ring=ring, options=options)
    assert str(info.value) == (
        "--kill count:0@20 is not before the end of the run (--duration 1); "
        "kill earlier or run longer"
    )
