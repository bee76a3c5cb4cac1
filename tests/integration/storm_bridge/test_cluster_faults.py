"""Misbehaving tasks: hangs, garbage, unknown commands and ids, poison, timeouts.

The faulty counter has two tasks behind a fields grouping. Each test sends the
fault word alone in its sentence and pads with words that the grouping sends to
the *other* task, so it can check that the fault kills and restarts exactly one
task and that nothing else is lost.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from storm_bridge.cluster import ClusterOptions, EventKind, LocalCluster
from storm_bridge.errors import (
    MultilangProtocolError,
    SubprocessTimeoutError,
    TaskExitedError,
)
from topology_api.java_hash import fields_task_index

pytestmark = pytest.mark.storm

IDLE_TIMEOUT_S = 60.0
CANDIDATES = (
    "alpha bravo charlie delta echo foxtrot golf hotel "
    "india juliet kilo lima mike november oscar papa"
).split()


def scenario(fault_word: str) -> tuple[list[str], int, list[str]]:
    """Sentences, the index of the faulty task, and the safe words."""
    faulty_index = fields_task_index([fault_word], 2)
    safe = [w for w in CANDIDATES if fields_task_index([w], 2) != faulty_index]
    assert len(safe) >= 3
    sentences = [" ".join(safe[:3]), fault_word, " ".join(safe[1:]), safe[0]]
    return sentences, faulty_index, safe


def run_fault(
    make_cluster: Callable[..., LocalCluster], fault_word: str
) -> tuple[LocalCluster, list[str], int]:
    sentences, faulty_index, _ = scenario(fault_word)
    conf = {"sbt.sentences": sentences, "topology.subprocess.timeout.secs": 2}
    cluster = make_cluster("sbt_faults", conf)
    cluster.start()
    faulty_task = cluster.task_ids("faulty_bolt")[faulty_index]
    restarted = lambda c: len(c.events(EventKind.TASK_RESTARTED, "faulty_bolt")) == 1  # noqa: E731
    assert cluster.wait_for(restarted, 20.0)
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    return cluster, sentences, faulty_task


def check_only_the_fault_was_lost(
    cluster: LocalCluster,
    sentences: list[str],
    fault_word: str,
    faulty_task: int,
    read_counts: Callable[[str], dict[str, int]],
) -> None:
    counters = cluster.counters()
    assert counters["faulty_bolt"].restarts == 1
    assert counters["split_bolt"].restarts == counters["sentence_spout"].restarts == 0
    spout_log = [e.message for e in cluster.events(EventKind.LOG, "sentence_spout")]
    fault_id = str(sentences.index(fault_word))
    assert f"failed {fault_id}" in spout_log
    acked = {m.split()[1] for m in spout_log if m.startswith("acked")}
    assert acked == {str(i) for i in range(len(sentences))} - {fault_id}
    safe_counts: dict[str, int] = {}
    for sentence in sentences:
        for word in sentence.split():
            if word != fault_word:
                safe_counts[word] = safe_counts.get(word, 0) + 1
    counted = read_counts("faulty")
    counted.pop(fault_word, None)  # some faults strike after the bolt counted
    assert counted == safe_counts
    (restart,) = cluster.events(EventKind.TASK_RESTARTED, "faulty_bolt")
    assert restart.task_id == faulty_task
    ready = [
        e for e in cluster.events(EventKind.TASK_READY) if e.task_id == faulty_task
    ]
    assert len(ready) == 2


@pytest.mark.parametrize(
    ("fault_word", "detail"),
    [
        (
            "garbage",
            "wrote something that is not a JSON message: 'this is not a multilang",
        ),
        ("unknown", "Unknown command received: 'frobnicate'"),
        (
            "badack",
            "Acked a non-existent or already acked/failed id: 'no-such-tuple-id'",
        ),
    ],
)
def test_protocol_violations_restart_the_task(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[str], dict[str, int]],
    fault_word: str,
    detail: str,
) -> None:
    cluster, sentences, faulty_task = run_fault(make_cluster, fault_word)
    (error,) = cluster.errors()
    assert isinstance(error, MultilangProtocolError)
    assert (error.component, error.task_id) == ("faulty_bolt", faulty_task)
    assert str(error).startswith(
        f"component 'faulty_bolt' task {faulty_task}: {detail}"
    )
    (event,) = cluster.events(EventKind.PROTOCOL_ERROR)
    assert (event.component, event.task_id) == ("faulty_bolt", faulty_task)
    assert cluster.counters()["faulty_bolt"].errors == 1
    check_only_the_fault_was_lost(
        cluster, sentences, fault_word, faulty_task, read_counts
    )


def test_silent_bolt_is_killed_after_the_subprocess_timeout(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[str], dict[str, int]],
) -> None:
    cluster, sentences, faulty_task = run_fault(make_cluster, "hang")
    (error,) = cluster.errors()
    assert isinstance(error, SubprocessTimeoutError)
    assert (error.component, error.task_id) == ("faulty_bolt", faulty_task)
    assert "subprocess heartbeat timeout" in str(error)
    assert "over the 2 s of topology.subprocess.timeout.secs" in str(error)
    (died,) = cluster.events(EventKind.TASK_DIED)
    assert died.data["exit_code"] == -9
    check_only_the_fault_was_lost(cluster, sentences, "hang", faulty_task, read_counts)


def test_poison_tuple_fails_and_reports_its_values(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[str], dict[str, int]],
) -> None:
    cluster, sentences, faulty_task = run_fault(make_cluster, "poison")
    (report,) = cluster.events(EventKind.COMPONENT_ERROR)
    assert (report.component, report.task_id) == ("faulty_bolt", faulty_task)
    assert "ValueError" in report.message
    assert "values=Split_BoltDefaultTuple(word='poison')" in report.message
    counters = cluster.counters()
    assert counters["faulty_bolt"].failed == 1  # the bolt failed the tuple itself
    assert counters["sentence_spout"].failed == 1
    (error,) = cluster.errors()
    assert isinstance(error, TaskExitedError)
    # pystorm reports the exception and exits with a silent stderr: the exit
    # still says why, since the report may list only the first deaths
    assert str(error) == (
        f"component 'faulty_bolt' task {faulty_task}: subprocess exited with "
        "status 1: ValueError: cannot digest 'poison'"
    )
    check_only_the_fault_was_lost(
        cluster, sentences, "poison", faulty_task, read_counts
    )


def test_unacked_tuples_fail_back_after_the_message_timeout(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    conf = {"sbt.sentences": ["a", "b"], "topology.message.timeout.secs": 1}
    cluster = make_cluster("sbt_silent", conf)
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    counters = cluster.counters()["sentence_spout"]
    assert (counters.acked, counters.failed, counters.timed_out) == (0, 2, 2)
    timeouts = cluster.events(EventKind.TUPLES_TIMED_OUT)
    assert sum(e.data["count"] for e in timeouts) == 2
    assert all(e.component == "sentence_spout" for e in timeouts)
    spout_log = [e.message for e in cluster.events(EventKind.LOG, "sentence_spout")]
    assert {"failed 0", "failed 1"} <= set(spout_log)
    assert cluster.counters()["silent_bolt"].restarts == 0


def test_lenient_bolts_ignore_unknown_commands(
    make_cluster: Callable[..., LocalCluster],
    read_counts: Callable[[str], dict[str, int]],
) -> None:
    """With ``strict_commands=False`` bolts behave as ShellBolt: unknown ignored."""
    sentences, _, _ = scenario("unknown")
    options = ClusterOptions(strict_commands=False)
    cluster = make_cluster("sbt_faults", {"sbt.sentences": sentences}, options=options)
    cluster.start()
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    counters = cluster.counters()
    assert counters["sentence_spout"].acked == len(sentences)
    assert counters["faulty_bolt"].restarts == 0
    assert read_counts("faulty")["unknown"] == 1


@pytest.mark.parametrize("fail_lost", [True, False])
def test_tuples_of_a_dead_task_fail_back(
    make_cluster: Callable[..., LocalCluster], fail_lost: bool
) -> None:
    """Lost tuples fail at once, or (as in Storm) when the message timeout hits."""
    conf = {
        "sbt.sentences": ["a", "b"],
        "topology.message.timeout.secs": 30 if fail_lost else 1,
    }
    options = ClusterOptions(fail_lost_tuples=fail_lost)
    cluster = make_cluster("sbt_silent", conf, options=options)
    cluster.start()
    emitted = lambda c: c.counters()["sentence_spout"].transferred == 2  # noqa: E731
    assert cluster.wait_for(emitted, 20.0)
    cluster.kill_task(cluster.task_ids("silent_bolt")[0])
    assert cluster.run_until_idle(IDLE_TIMEOUT_S)
    spout = cluster.counters()["sentence_spout"]
    assert (spout.failed, spout.timed_out) == (2, 0 if fail_lost else 2)
    lost = cluster.events(EventKind.TUPLES_LOST, "silent_bolt")
    assert [e.data["count"] for e in lost] == [2]


def test_a_task_that_cannot_read_a_tuple_says_why_it_exited(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    # without topology.testing.always.try.serialize Storm delivers a tuple
    # one value short; pystorm's reader fails, logs it and exits silently on
    # stderr: the exit must still name the exception
    cluster = make_cluster("sbt_short", {"sbt.sentences": ["hello"]})
    cluster.start()
    assert cluster.wait_for(lambda c: bool(c.errors()), IDLE_TIMEOUT_S)
    error = cluster.errors()[0]
    assert isinstance(error, TaskExitedError)
    record_task = cluster.task_ids("record_bolt")[0]
    assert str(error) == (
        f"component 'record_bolt' task {record_task}: subprocess exited with "
        "status 1: TypeError: Short_BoltDefaultTuple.__new__() missing 1 required "
        "positional argument: 'n'"
    )
