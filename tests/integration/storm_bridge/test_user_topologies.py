"""Topologies as streamparse users write them, beyond the example word counts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.cluster import LocalCluster
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess

pytestmark = pytest.mark.storm

TOPOLOGIES = Path(__file__).parent / "topologies"
IDLE_TIMEOUT_S = 60.0
WORDS = ["alpha", "beta", "gamma", "delta"] * 10


def test_a_spout_that_pauses_is_not_taken_for_dry(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
) -> None:
    # the spout emits nothing for a while before its first tuple and half-way:
    # --until-idle must wait for the rest instead of ending the run there
    conf = {
        "sbt.sentences": WORDS,
        "sbt.pause_s": 0.5,
        "sr3.idle.quiet.s": 2.0,  # the default, longer than the pauses
    }
    cluster = make_cluster("sbt_paused", conf)
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["pausing_spout"].acked == len(WORDS)
    assert read_counts() == dict(Counter(WORDS))


def test_a_spout_waiting_for_its_source_is_not_taken_for_dry(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
    out_dir: Path,
) -> None:
    # a source that is down (a broker, say) looks like the end of the input: the
    # spout emits nothing. It says it waits, so --until-idle goes on through an
    # outage far longer than the quiet period, then reads everything
    down = out_dir / "source-down"
    down.touch()
    cluster = make_cluster("sbt_waiting", {"sbt.sentences": WORDS})  # quiet 0.5 s
    cluster.start()

    assert not cluster.run_until_idle(4.0)  # 8 quiet periods: still waiting
    assert "waits for its source" in (cluster.busy_reason() or "")
    down.unlink()

    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["waiting_spout"].acked == len(WORDS)
    assert read_counts() == dict(Counter(WORDS))


def test_a_spout_at_the_end_of_its_input_ends_the_run_without_a_quiet_period(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
) -> None:
    # the spout says its input ended (end_of_input) while its slow bolts still
    # count: --until-idle waits for them, then ends without the quiet period of
    # sr3.idle.quiet.s, here longer than the wait (a spout that says nothing
    # would keep the run going for ten minutes)
    conf = {
        "sbt.sentences": WORDS,
        "sbt.bolt_sleep_s": 0.02,
        "sr3.idle.quiet.s": 600.0,
    }
    cluster = make_cluster("sbt_finite", conf)
    cluster.start()

    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["finite_spout"].acked == len(WORDS)
    assert read_counts() == dict(Counter(WORDS))


def test_a_streamparse_project_layout_runs(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
) -> None:
    # topologies/sbt_project.py imports its spout and bolt from ../src, as the
    # projects `sparse quickstart` creates do: every task must import them too
    cluster = make_cluster("project/topologies/sbt_project", {"sbt.sentences": WORDS})
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["word_spout"].acked == len(WORDS)
    assert read_counts() == dict(Counter(WORDS))


def test_streams_nothing_subscribes_to_are_outputs(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    # a bolt whose default stream goes nowhere outputs it even though another
    # bolt reads its `loud` stream; a named stream nobody reads is an output too
    sentences = ["hello world!", "bye world!", "hello again"]
    cluster = make_cluster("sbt_partial_sinks", {"sbt.sentences": sentences})
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    words = {w for s in sentences for w in s.split()}
    loud = {w.upper() for w in words if w.endswith("!")}
    assert cluster.outputs() == {
        "loud_sink": {},
        "split_bolt": {json.dumps([w]): [w] for w in sorted(words)},
        "split_too:loud": {json.dumps([w]): [w] for w in sorted(loud)},
        "word_sink": {},
    }


@pytest.mark.zk
@pytest.mark.slow
def test_a_batching_bolt_before_a_stateful_one_stays_exactly_once(lab: Lab) -> None:
    # the batching bolt owes its batch when a barrier passes: tuples after the
    # barrier must not be summed into it, or the rollback replays them twice
    count = 6000
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={"sbt.count": count, "topology.max.spout.pending": 500},
        kills=[TaskKill("total", 0, at_s=3.0)],
        timeout_s=120.0,
    )
    try:
        report = run_topology(TOPOLOGIES / "sbt_batched.py", ring=ring, options=options)
        _, state = ring.committed_state("sbt_batched", "total")
    finally:
        ring.close()
    assert report.idle is True
    assert [r["cause"] for r in report.recoveries] == ["total:0"]
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for n in range(count):  # the spout's numbers, summed per key
        sums[f"k{n % 9}"] += n
        counts[f"k{n % 9}"] += 1
    expected = {key: [key, sums[key], counts[key]] for key in sums}
    assert report.outputs["total"] == {
        json.dumps([key]): values for key, values in expected.items()
    }
    assert {key[0]: [key[0], s["sum"], s["count"]] for key, s in state.items()} == (
        expected
    )


@pytest.mark.zk
def test_keys_python_holds_equal_stay_apart_in_the_committed_state(lab: Lab) -> None:
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(until_idle=True, timeout_s=60.0)
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_lookalike_keys.py", ring=ring, options=options
        )
        _, dump = ring.committed_dump("sbt_lookalike_keys", "seen")
        summary = ring.state_summary("sbt_lookalike_keys", ["seen"])
    finally:
        ring.close()
    assert report.idle is True
    expected = ['["1"]', "[0]", "[1.0]", "[1]", "[false]", "[true]"]
    assert sorted(dump) == sorted(expected)
    assert all(fields == {"seen": 3} for fields in dump.values())
    assert summary["seen"]["keys"] == len(expected)


def test_a_component_may_use_any_attribute_name_and_stays_exactly_once(
    lab: Lab,
) -> None:
    # the user's classes set _sr3_owner, _sr3_ring, _sr3_sought, ...: names SR3
    # once kept on the instance. A task's death rolls every task back: the
    # bolts restore their snapshots and the spout seeks to its committed offset.
    count = 4000
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={"sbt.count": count, "topology.max.spout.pending": 200},
        kills=[TaskKill("total", 0, at_s=3.0)],
        timeout_s=120.0,
    )
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_own_attributes.py", ring=ring, options=options
        )
        _, state = ring.committed_state("sbt_own_attributes", "total")
    finally:
        ring.close()
    assert report.idle is True
    assert [r["cause"] for r in report.recoveries] == ["total:0"]
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for n in range(count):
        sums[f"k{n % 7}"] += n
        counts[f"k{n % 7}"] += 1
    assert {key[0]: (s["sum"], s["count"]) for key, s in state.items()} == {
        key: (sums[key], counts[key]) for key in sums
    }
