"""Recovery times of a campaign, per failure kind, from its runs' reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sr3.errors import ConfigError
from sr3_cli.chaos import (
    APACHE_STORM,
    APACHE_STORM_KINDS,
    KINDS,
    MODES,
    NETNS_KINDS,
    NODE_KINDS,
    SLOW_LINK,
    SPARK,
    SPARK_KINDS,
    SPARK_STANDALONE,
    SPARK_STANDALONE_KINDS,
    Fault,
    Outcome,
    Schedule,
    drawn_kinds,
    generate,
    recovery_times,
    replay_command,
    summarize_recoveries,
)
from sr3_cli.chaos_runs import Injector
from sr3_cli.lab import Lab
from storm_bridge.report import RunReport
from topology_api.topology import load_topology

TOPOLOGY = Path(__file__).resolve().parents[2] / "e2e" / "topologies" / "exact_wc.py"


def recovery(cause: str, detect: float, restore: float | None, replay: float) -> Any:
    timeline = {"detect_s": detect, "restore_s": restore, "replay_s": replay}
    return {"cause": cause, "timeline": timeline}


def outcome(faults: tuple[Fault, ...], recoveries: list[Any]) -> Outcome:
    report = RunReport(
        topology="t",
        seconds=1.0,
        idle=True,
        counters={},
        checkpoints={},
        recoveries=recoveries,
        state={},
        errors=[],
    )
    return Outcome(Schedule(1, 0, "local", faults), True, 1.0, report=report)


def test_recoveries_are_timed_from_the_failure_and_sorted_by_its_kind() -> None:
    faults = (
        Fault("kill-task", 0.5, "count:1"),
        Fault("kill-node", 1.0, "node-2", 2.0),
        Fault("freeze-node", 1.5, "node-3", 3.0),
    )
    runs = [
        outcome(
            faults,
            [
                recovery("count:1", 0.1, 0.2, 0.3),
                recovery("ring node node-2, count:0", 0.5, 0.5, 1.0),
                recovery("ring node node-3", 2.0, 1.0, 1.0),
                recovery("split:0", 0.1, 0.1, 0.1),
                recovery("count:1", 0.1, None, 0.1),  # never restored: left out
            ],
        ),
        outcome((Fault("kill-task", 0.5, "count:1"),), [recovery("count:1", 0, 1, 1)]),
    ]
    times = recovery_times(runs)
    assert {k: [round(v, 3) for v in t] for k, t in times.items()} == {
        "kill-task": [0.6, 2.0],
        "kill-node": [2.0],
        "freeze-node": [4.0],
        "other": [0.3],
    }
    summary = summarize_recoveries(times)
    assert summary["kill-task"] == {
        "count": 2,
        "p50_s": 0.6,
        "p99_s": 2.0,
        "max_s": 2.0,
    }
    assert summary["other"]["count"] == 1


def test_spark_schedules_draw_no_task_kills_and_storm_seeds_are_unchanged() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3", "node-4"]
    both = generate(4, 30, topology=topology, nodes=nodes, modes=(*MODES, SPARK))
    assert {s.mode for s in both} == {"local", "native", SPARK}
    spark = [s for s in both if s.mode == SPARK]
    assert all(f.kind in SPARK_KINDS for s in spark for f in s.faults)
    # a Storm-only campaign draws what it drew before Spark joined
    storm = generate(2, 3, topology=topology, nodes=nodes)
    expected = "local: kill-task count:1@1.3s, restart-zk zookeeper@1.7s for 1.8s"
    assert storm[2].describe() == expected


def test_a_replay_names_the_draws_that_shaped_the_campaign() -> None:
    schedule = Schedule(4, 7, SPARK, ())
    command = replay_command(schedule, TOPOLOGY, {"a.b": 1}, ["--engine=spark"])
    assert "--seed 4 --schedules 8 --only 7 --engine=spark -o a.b=1" in command


def test_netns_kinds_are_drawn_only_for_a_netns_campaign() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3"]
    plain = generate(7, 40, topology=topology, nodes=nodes)
    assert not any(f.kind in NETNS_KINDS for s in plain for f in s.faults)
    netns = generate(7, 40, topology=topology, nodes=nodes, netns=True)
    kinds = {f.kind for s in netns for f in s.faults}
    assert set(NETNS_KINDS) <= kinds
    for schedule in netns:
        for fault in schedule.faults:
            if fault.kind == "netem-slow":
                assert fault.target == SLOW_LINK
                assert fault.down_s > 0
            if fault.kind == "partition-node":
                assert fault.target in nodes
        # a cut-off node counts against the r - 1 nodes out at once
        out = [f for f in schedule.faults if f.kind in (*NODE_KINDS, "partition-node")]
        assert len({f.target for f in out}) == len(out)
        for fault in out:
            at_once = [f for f in out if f.at_s <= fault.at_s < f.at_s + f.down_s]
            assert len(at_once) <= 2


def test_apache_storm_schedules_kill_workers_and_the_coordinator_only_there() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3"]
    storm = generate(5, 40, topology=topology, nodes=nodes, modes=(APACHE_STORM,))
    assert {s.mode for s in storm} == {APACHE_STORM}
    kinds = {f.kind for s in storm for f in s.faults}
    # the lab's Storm cluster shares the ring's ZooKeeper: no restart-zk there
    assert kinds == set(APACHE_STORM_KINDS)
    assert {f.target for s in storm for f in s.faults if f.kind == "kill-worker"} == {
        "0"
    }
    # the other modes never draw them, so their seeds replay as before
    local = generate(5, 40, topology=topology, nodes=nodes)
    assert {f.kind for s in local for f in s.faults} == set(KINDS)


def test_kinds_narrow_a_campaign_and_one_drawn_nowhere_is_refused() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3"]
    only = ("kill-worker", "kill-coordinator")
    storm = generate(
        8, 20, topology=topology, nodes=nodes, modes=(APACHE_STORM,), kinds=only
    )
    assert {f.kind for s in storm for f in s.faults} == set(only)
    with pytest.raises(ConfigError, match="the local schedules draw none of them"):
        drawn_kinds("local", only=only)


def test_worker_and_coordinator_recoveries_count_under_their_kinds() -> None:
    faults = (
        Fault("kill-worker", 0.5, "0"),
        Fault("kill-coordinator", 1.0, "coordinator"),
    )
    run = outcome(
        faults, [recovery("worker 0", 1.0, 2.0, 3.0), recovery("coordinator", 1, 1, 1)]
    )
    times = recovery_times([run])
    assert times == {"kill-worker": [6.0], "kill-coordinator": [3.0]}


def test_spark_standalone_schedules_kill_executors_and_one_driver_only_there() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3"]
    spark = generate(3, 40, topology=topology, nodes=nodes, modes=(SPARK_STANDALONE,))
    assert {s.mode for s in spark} == {SPARK_STANDALONE}
    assert {f.kind for s in spark for f in s.faults} == set(SPARK_STANDALONE_KINDS)
    # a second driver kill is not drawn: one resume from the ring per schedule
    assert all(sum(f.kind == "kill-driver" for f in s.faults) <= 1 for s in spark)
    assert {f.target for s in spark for f in s.faults if f.kind != "kill-node"} == {
        "executor",
        "driver",
    }
    # the other modes never draw them, so their seeds replay as before
    local = generate(3, 40, topology=topology, nodes=nodes, modes=(*MODES, SPARK))
    assert not {"kill-executor", "kill-driver"} & {
        f.kind for s in local for f in s.faults
    }


def test_executor_and_driver_recoveries_timed_end_to_end_count_under_their_kinds() -> (
    None
):
    faults = (
        Fault("kill-executor", 0.5, "executor"),
        Fault("kill-driver", 1.0, "driver"),
        Fault("kill-node", 1.5, "node-2", 2.0),
    )
    run = outcome(
        faults,
        [
            {"cause": "executor", "timeline": {"total_s": 4.0}},
            {"cause": "driver", "timeline": {"total_s": 9.0}},
            {"cause": "ring node node-2", "timeline": {"total_s": 1.5}},
            {"cause": "executor", "timeline": {"total_s": None}},  # never committed
        ],
    )
    assert recovery_times([run]) == {
        "kill-executor": [4.0],
        "kill-driver": [9.0],
        "kill-node": [1.5],
    }


def test_a_zookeeper_restart_is_refused_on_a_lab_that_does_not_own_its_zookeeper(
    tmp_path: Path,
) -> None:
    lab = Lab(root=tmp_path)
    lab.save()
    lab.use_zookeeper("zk1:2181")
    restart = Fault("restart-zk", 1.0, "zookeeper", 0.5)
    with pytest.raises(ConfigError, match="uses the external ZooKeeper at zk1:2181"):
        Injector(Lab.load(tmp_path), [restart])
    Injector(Lab.load(tmp_path), [Fault("freeze-node", 1.0, "node-1", 0.5)])  # fine


def test_apache_storm_campaigns_draw_netns_faults_only_when_asked() -> None:
    topology = load_topology(TOPOLOGY)
    nodes = ["node-1", "node-2", "node-3"]
    plain = generate(7, 40, topology=topology, nodes=nodes, modes=(APACHE_STORM,))
    netns = generate(
        7, 40, topology=topology, nodes=nodes, modes=(APACHE_STORM,), netns=True
    )
    assert not any(f.kind in NETNS_KINDS for s in plain for f in s.faults)
    assert set(NETNS_KINDS) <= {f.kind for s in netns for f in s.faults}
    assert {s.mode for s in netns} == {APACHE_STORM}
