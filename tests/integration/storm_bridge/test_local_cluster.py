"""Whole topologies on the local multilang cluster: counts, streams, ticks, restarts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.cluster import ClusterState, EventKind, LocalCluster
from storm_bridge.errors import (
    ClusterStateError,
    StormBridgeError,
    TaskExitedError,
)
from tests.unit.topology_api.test_groupings import STORM_2_8_3_ROUTES
from topology_api.errors import TopologyError

pytestmark = pytest.mark.storm

IDLE_TIMEOUT_S = 60.0
SENTENCES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "a stitch in time saves nine",
    "the end!",
] * 50


def expected_counts(sentences: list[str]) -> dict[str, int]:
    return dict(Counter(word for sentence in sentences for word in sentence.split()))


def logs(cluster: LocalCluster, component: str) -> list[str]:
    return [e.message for e in cluster.events(EventKind.LOG, component)]


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_wordcount_is_exact(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
    serializer: str,
) -> None:
    cluster = make_cluster(
        "sbt_wordcount", {"sbt.sentences": SENTENCES}, serializer=serializer
    )
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    counters = cluster.counters()
    assert counters["sentence_spout"].acked == len(SENTENCES)
    assert counters["sentence_spout"].failed == 0
    assert counters["count_bolt"].acked == sum(expected_counts(SENTENCES).values())
    assert all(c.restarts == 0 and c.errors == 0 for c in counters.values())
    assert read_counts() == expected_counts(SENTENCES)
    # fields grouping: every word was counted by exactly one task
    assert cluster.task_to_component[1] == "__acker"
    cluster.stop()
    assert cluster.state is ClusterState.STOPPED


def test_without_ackers_spout_tuples_are_acked_at_once(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
) -> None:
    conf = {"sbt.sentences": SENTENCES[:8], "topology.acker.executors": 0}
    cluster = make_cluster("sbt_wordcount", conf)
    cluster.start()
    assert "__acker" not in cluster.task_to_component.values()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["sentence_spout"].acked == 8
    assert read_counts() == expected_counts(SENTENCES[:8])


def test_example_topology() -> None:
    cluster = LocalCluster(
        Path(__file__).parents[3] / "topologies" / "quickstart.py",
        {"wordcount.rounds": 5},
    )
    try:
        cluster.start()
        assert cluster.run_until_idle(IDLE_TIMEOUT_S)
        assert cluster.counters()["word_spout"].acked == 40
    finally:
        cluster.stop()


def records(out_dir: Path, component: str) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for path in out_dir.glob(f"record-{component}-*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[int(path.stem.rsplit("-", 1)[1])] = [
            r for r in rows if r["kind"] == "tuple"
        ]
    return found


def test_streams_and_groupings(
    make_cluster: Callable[..., LocalCluster], out_dir: Path
) -> None:
    sentences = ["hey you!", "a bb ccc dddd", "go!"]
    cluster = make_cluster("sbt_streams", {"sbt.sentences": sentences})
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["sentence_spout"].acked == 3
    words = [w for s in sentences for w in s.split()]

    loud = records(out_dir, "loud_sink")  # ALL: every task gets the loud stream
    assert sorted(loud) == cluster.task_ids("loud_sink")
    for rows in loud.values():
        assert [(r["stream"], r["values"]) for r in rows] == [
            ("loud", ["YOU!"]),
            ("loud", ["GO!"]),
        ]

    low, high = cluster.task_ids("global_sink")  # GLOBAL: the lowest task only
    by_task = records(out_dir, "global_sink")
    assert [r["values"][0] for r in by_task[low]] == words
    assert by_task.get(high, []) == []

    direct = records(out_dir, "direct_sink")  # DIRECT: the emitter picks by length
    targets = cluster.task_ids("direct_sink")
    for task, rows in direct.items():
        assert all(targets[len(r["values"][0]) % 2] == task for r in rows)
    assert sorted(r["values"][0] for rows in direct.values() for r in rows) == sorted(
        words
    )

    shuffled = records(out_dir, "shuffle_sink")  # SHUFFLE with need_task_ids replies
    replies = [m for m in logs(cluster, "direct_split") if m.startswith("default ")]
    for reply in replies:
        _, word, _, task_list = reply.split(" ", 3)
        (task,) = json.loads(task_list)
        assert word in [r["values"][0] for r in shuffled[task]]
    assert sorted(len(rows) for rows in shuffled.values()) == [3, 4]  # round robin

    metrics = cluster.events(EventKind.METRICS, "loud_sink")
    assert [(e.message, e.data["params"]) for e in metrics] == [
        ("records", {"stream": "loud"})
    ] * 4


def test_fields_grouping_sends_each_value_to_the_task_storm_2_8_3_picks(
    make_cluster: Callable[..., LocalCluster], out_dir: Path
) -> None:
    # ints past 32 and 64 bits, negatives, decimals, booleans, None, unicode and
    # lists, each to the task Storm's own FieldsGrouper picked (the unit test's
    # vectors, produced with Storm 2.8.3's jars; `integer` is 2.8.3's boxing)
    values = [row[0] for row in STORM_2_8_3_ROUTES]
    conf = {"sbt.sentences": values, "sr3.storm.json.integer.boxing": "integer"}
    cluster = make_cluster("sbt_fields_routes", conf)
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["value_spout"].acked == len(values)
    tasks = cluster.task_ids("value_sink")
    assert len(tasks) == 5
    expected = sorted(
        (json.dumps(v), tasks[index]) for v, index, *_ in STORM_2_8_3_ROUTES
    )
    got = sorted(
        (json.dumps(row["values"][0]), task)
        for task, rows in records(out_dir, "value_sink").items()
        for row in rows
    )
    assert got == expected


def test_tick_tuples(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster("sbt_streams", {"sbt.sentences": []})
    cluster.start()
    tasks = set(cluster.task_ids("global_sink"))

    def ticked(c: LocalCluster) -> bool:
        return {
            e.task_id
            for e in c.events(EventKind.LOG, "global_sink")
            if e.message == "tick [1]"
        } == tasks

    assert cluster.wait_for(ticked, 10.0)
    assert not [m for m in logs(cluster, "loud_sink") if m.startswith("tick")]


def test_activate_and_deactivate(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster("sbt_wordcount", {"sbt.sentences": SENTENCES[:4]})
    cluster.start()
    assert cluster.wait_for(lambda c: "activated" in logs(c, "sentence_spout"), 10.0)
    cluster.deactivate()
    assert cluster.wait_for(lambda c: "deactivated" in logs(c, "sentence_spout"), 10.0)
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    cluster.activate()
    assert cluster.wait_for(
        lambda c: logs(c, "sentence_spout").count("activated") == 2, 10.0
    )
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    assert cluster.counters()["sentence_spout"].acked == 4


def test_killed_tasks_are_restarted(make_cluster: Callable[..., LocalCluster]) -> None:
    sentences = SENTENCES[:20]
    cluster = make_cluster("sbt_wordcount", {"sbt.sentences": sentences})
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    count_task = cluster.task_ids("count_bolt")[1]
    old_pid = cluster.task_pid(count_task)
    cluster.kill_task(count_task)

    def restarted(c: LocalCluster, component: str, task: int) -> bool:
        ready = [
            e for e in c.events(EventKind.TASK_READY, component) if e.task_id == task
        ]
        return len(ready) == 2

    assert cluster.wait_for(lambda c: restarted(c, "count_bolt", count_task), 20.0)
    restart = cluster.events(EventKind.TASK_RESTARTED, "count_bolt")
    assert [(e.component, e.task_id) for e in restart] == [("count_bolt", count_task)]
    (died,) = cluster.events(EventKind.TASK_DIED)
    assert died.data["exit_code"] == -9
    (error,) = cluster.errors()
    assert isinstance(error, TaskExitedError)
    assert (error.component, error.task_id) == ("count_bolt", count_task)
    assert cluster.task_pid(count_task) not in (None, old_pid)

    # A restarted spout re-emits everything; the restarted counter takes its share.
    spout_task = cluster.task_ids("sentence_spout")[0]
    cluster.kill_task(spout_task)
    assert cluster.wait_for(lambda c: restarted(c, "sentence_spout", spout_task), 20.0)
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    counters = cluster.counters()
    assert counters["sentence_spout"].acked == 2 * len(sentences)
    assert counters["sentence_spout"].failed == 0
    assert (counters["count_bolt"].restarts, counters["sentence_spout"].restarts) == (
        1,
        1,
    )
    assert counters["split_bolt"].restarts == 0


def test_max_spout_pending(make_cluster: Callable[..., LocalCluster]) -> None:
    conf = {
        "sbt.sentences": ["a", "b", "c", "d"],
        "sbt.log_emits": True,
        "topology.max.spout.pending": 2,
        "topology.message.timeout.secs": 1,
    }
    cluster = make_cluster("sbt_silent", conf)
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    spout_log = [
        m
        for m in logs(cluster, "sentence_spout")
        if m.split()[0] in ("emitted", "failed")
    ]
    # The third emit waits for a slot: the first two tuples must time out first.
    assert spout_log.index("emitted 2") > max(
        spout_log.index("failed 0"), spout_log.index("failed 1")
    )
    assert cluster.counters()["sentence_spout"].timed_out == 4


def test_tasks_that_never_start(make_cluster: Callable[..., LocalCluster]) -> None:
    """Components are imported from the topology module itself: break it."""
    cluster = make_cluster("sbt_broken", env={"SBT_BREAK": "1"})
    with pytest.raises(StormBridgeError, match="not ready within 2.0 s") as info:
        cluster.start(timeout_s=2.0)
    assert "subprocess exited with status 1" in str(info.value)
    assert cluster.state is ClusterState.STOPPED
    died = cluster.events(EventKind.TASK_DIED)
    assert any("ImportError: broken on purpose" in e.data["stderr"] for e in died)
    # every task was restarted at least once within the 2 s (the supervisor's
    # backoff decides how many more times: that depends on the machine's load)
    assert all(c.restarts >= 1 for c in cluster.counters().values())


def test_a_start_that_gives_up_returns_once_a_task_cannot_come_up(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """``sr3 run --until-idle`` reports the exception instead of a start timeout.

    The flaky bolt dies in every ``initialize`` while the slow bolt is not up
    yet: the topology is never wholly ready at one moment.
    """
    cluster = make_cluster("sbt_slow_start", {"sbt.sentences": ["a b"]})
    cluster.give_up_on_tasks_never_up()
    cluster.start(timeout_s=20.0)
    assert cluster.state is ClusterState.RUNNING
    assert cluster.cannot_come_up()
    assert not cluster.run_until_idle(IDLE_TIMEOUT_S)
    died = cluster.events(EventKind.TASK_DIED)
    assert any(
        "ConnectionError: cannot reach db.example:5432" in e.data["stderr"]
        for e in died
    )


def test_conf_must_be_serializable(make_cluster: Callable[..., LocalCluster]) -> None:
    with pytest.raises(TopologyError, match="cannot be sent with the json serializer"):
        make_cluster("sbt_wordcount", {"sbt.sentences": [], "sbt.when": object()})


def test_lifecycle_errors(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster("sbt_wordcount", {"sbt.sentences": []})
    with pytest.raises(ClusterStateError, match="is new, not running"):
        cluster.run_until_idle(1.0)
    cluster.start()
    with pytest.raises(ClusterStateError, match="is running, not new"):
        cluster.start()
    cluster.stop()
    cluster.stop()  # idempotent
    with pytest.raises(ClusterStateError, match="is stopped"):
        cluster.kill_task(1)


def test_a_stuck_bolt_holds_back_only_the_spouts_whose_tuples_reach_it(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[], dict[str, int]],
) -> None:
    # as on Storm 2: a full queue blocks what sends to it, not unrelated spouts;
    # 4 KB words fill the stuck task's stdin pipe after a few, then its queue
    words = [f"w{i % 7}" + "x" * 4096 for i in range(60)]
    conf = {"sbt.sentences": words, "topology.shellbolt.max.pending": 4}
    cluster = make_cluster("sbt_branches", conf)
    cluster.start()
    counted = cluster.wait_for(
        lambda c: c.counters()["count_bolt"].acked == len(words), timeout_s=60
    )
    assert counted, cluster.counters()
    assert read_counts() == expected_counts(words)
    assert cluster.counters()["stuck_bolt"].acked == 0  # still stuck on its first
