"""Global epochs on the local cluster: barriers, commits, rollback, poison tuples.

These runs have no ring (``sr3.zk.hosts`` unset): stateful bolts keep their state
in memory and forward barriers, and commits go to an in-memory recorder. The
exactly-once runs with ZooKeeper and the ring are in ``tests/e2e``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.cluster import EventKind, LocalCluster
from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.native import MAX_REPLAYS
from storm_bridge.runner import NodeKill, RunOptions, run_topology
from storm_bridge.wiring import RingAccess

TOPOLOGIES = Path(__file__).parent / "topologies"

pytestmark = pytest.mark.storm

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"] * 6
TIMEOUT_S = 60.0


class MemoryHooks:
    """Records commits in memory."""

    def __init__(self) -> None:
        self.commits: list[tuple[int, dict[str, Any], list[str]]] = []

    def commit(self, epoch: int, offsets: Mapping[str, Any], owners: list[str]) -> None:
        self.commits.append((epoch, dict(offsets), list(owners)))


@pytest.fixture
def checkpointed() -> Iterator[Any]:
    clusters: list[LocalCluster] = []

    def make(conf: Mapping[str, Any]) -> tuple[LocalCluster, MemoryHooks]:
        hooks = MemoryHooks()
        settings = CheckpointSettings(hooks, interval_s=0.05, first_epoch=10)
        # dry 0.5 s, not 2 s, ends a run: sbt_checkpointed's spouts never pause
        full_conf = {"sr3.idle.quiet.s": 0.5, **conf}
        cluster = LocalCluster(
            TOPOLOGIES / "sbt_checkpointed.py", full_conf, checkpoint=settings
        )
        clusters.append(cluster)
        cluster.start()
        return cluster, hooks

    yield make
    for cluster in clusters:
        cluster.stop()


def committed(cluster: LocalCluster) -> int:
    return int(cluster.with_coordinator(lambda c: c.last_committed) or 0)


def finish(cluster: LocalCluster) -> int:
    """Run until idle, then until one more epoch committed; return its number."""
    assert cluster.run_until_idle(TIMEOUT_S)
    target = cluster.request_epoch()
    assert target is not None
    assert cluster.wait_for(lambda c: committed(c) >= target, TIMEOUT_S)
    return target


def test_epochs_commit_with_every_spout_offset(checkpointed: Any) -> None:
    cluster, hooks = checkpointed({"ck.words": WORDS, "ck.plain": ["yak", "emu"]})
    final = finish(cluster)
    epochs = [epoch for epoch, _, _ in hooks.commits]
    assert epochs[0] >= 10
    assert epochs == sorted(set(epochs))
    assert epochs[-1] == final
    _, offsets, owners = hooks.commits[-1]
    last = len(WORDS) - 1
    assert offsets == {
        "words/0": last - last % 2,
        "words/1": last - (last + 1) % 2,
        "plain/0": None,
    }
    assert owners == ["sbt_checkpointed/count/0", "sbt_checkpointed/count/1"]
    assert cluster.counters()["count"].acked == len(WORDS) + 2
    assert cluster.events(EventKind.TASK_RECYCLED) == []


def test_poison_tuple_in_a_stateful_bolt_is_replayed_then_dropped(
    checkpointed: Any,
) -> None:
    # each failure rolls back and replays it (its tree has no spout to fail
    # back to); after MAX_REPLAYS replays it is dropped, as native mode drops it
    cluster, _ = checkpointed({"ck.words": [*WORDS[:7], "poison"], "ck.plain": []})
    finish(cluster)
    counters = cluster.counters()["count"]
    assert counters.failed == MAX_REPLAYS + 1
    assert counters.restarts == 0
    reports = cluster.events(EventKind.COMPONENT_ERROR, "count")
    assert len(reports) == MAX_REPLAYS + 1
    assert all("ValueError" in r.message for r in reports)
    assert "values=UpperDefaultTuple(word='POISON')" in reports[0].message
    recoveries = cluster.with_coordinator(lambda k: list(k.recoveries))
    causes = {cause for r in recoveries for cause in r.cause.split(", ")}
    assert len(causes) == 1
    assert causes.pop().endswith(" failed a tuple")


def test_a_task_death_rolls_every_task_back(checkpointed: Any) -> None:
    cluster, hooks = checkpointed({"ck.words": WORDS, "ck.plain": []})
    first = finish(cluster)
    victim = cluster.task_ids("count")[0]
    cluster.kill_task(victim)

    def resumed(c: LocalCluster) -> bool:
        def done(k: Coordinator) -> bool:
            return bool(k.recoveries) and k.recoveries[-1].resumed_at is not None

        return bool(c.with_coordinator(done))

    assert cluster.wait_for(resumed, TIMEOUT_S)
    recovery = cluster.with_coordinator(lambda k: k.recoveries[-1])
    assert recovery.cause == "count:0"
    assert (recovery.task_index, recovery.task_id) == (0, victim)
    assert recovery.detected_at <= recovery.restored_at <= recovery.resumed_at
    assert set(recovery.restores) == {
        "sbt_checkpointed/count/0",
        "sbt_checkpointed/count/1",
    }
    recycled = {e.task_id for e in cluster.events(EventKind.TASK_RECYCLED)}
    others = set(cluster.task_to_component) - {victim}
    kept = ("__acker", "plain")  # a plain spout cannot seek: it keeps running
    assert recycled == {t for t in others if cluster.task_to_component[t] not in kept}
    assert finish(cluster) > first


def test_without_state_to_roll_back_only_the_dead_task_restarts(
    tmp_path: Path,
) -> None:
    # plain spout, plain counting bolts: nothing to restore or seek, so as on
    # Storm a dead task restarts alone and the other bolts keep their counts
    words = [w for w in ("ant", "bee", "cat", "dog", "eel", "fox") for _ in range(4)]
    conf = {"sbt.sentences": words, "sbt.pause_s": 1.0, "sbt.out_dir": str(tmp_path)}
    settings = CheckpointSettings(MemoryHooks(), interval_s=0.05, first_epoch=10)
    cluster = LocalCluster(TOPOLOGIES / "sbt_paused.py", conf, checkpoint=settings)
    try:
        cluster.start()
        # kill a counter while the spout pauses half-way: the other counter
        # has counted the first half and must go on from there
        half = len(words) // 2
        assert cluster.wait_for(
            lambda c: c.counters()["count_bolt"].acked >= half, TIMEOUT_S
        )
        victim, survivor = cluster.task_ids("count_bolt")
        cluster.kill_task(victim)
        # the death is noticed asynchronously: idle before it would be too soon
        assert cluster.wait_for(
            lambda c: bool(c.events(EventKind.TASK_DIED, "count_bolt")), TIMEOUT_S
        )
        assert finish(cluster) >= 10
        assert cluster.events(EventKind.TASK_RECYCLED) == []
        assert cluster.with_coordinator(lambda k: k.recoveries) == []
        restarted = {e.task_id for e in cluster.events(EventKind.TASK_RESTARTED)}
        assert restarted == {victim}
    finally:
        cluster.stop()
    counted: dict[str, int] = {}
    for line in (tmp_path / f"count-{survivor}.txt").read_text().splitlines():
        word, count = line.rsplit(" ", 1)
        counted[word] = max(counted.get(word, 0), int(count))
    assert counted
    assert all(n == words.count(word) for word, n in counted.items())


def test_barriers_do_not_wait_on_a_cycle(tmp_path: Path) -> None:
    # countdown reads its own output back through relay: waiting for relay's
    # barrier before forwarding its own would hold its tuples forever
    words = [w for w in ("ant", "bee", "cat", "dog") for _ in range(5)]
    conf = {"sbt.sentences": words, "sbt.pause_s": 0.5, "sbt.out_dir": str(tmp_path)}
    settings = CheckpointSettings(MemoryHooks(), interval_s=0.05, first_epoch=10)
    cluster = LocalCluster(TOPOLOGIES / "sbt_cycle.py", conf, checkpoint=settings)
    try:
        cluster.start()
        assert finish(cluster) > 10
        counters = cluster.counters()
        assert (counters["halved_spout"].acked, counters["halved_spout"].failed) == (
            len(words),
            0,
        )
        assert counters["relay"].acked == 3 * len(words)
    finally:
        cluster.stop()
    counted: dict[str, int] = {}
    for path in tmp_path.glob("count-*.txt"):
        for line in path.read_text().splitlines():
            word, count = line.rsplit(" ", 1)
            counted[word] = max(counted.get(word, 0), int(count))
    assert counted == {w: words.count(w) for w in set(words)}


@pytest.mark.zk
def test_without_state_a_ring_node_loss_restarts_nothing(
    lab: Lab, tmp_path: Path
) -> None:
    # no task keeps anything in the ring: losing a ring node used to roll the
    # whole topology back, restarting every task and losing the counts so far
    words = [w for w in ("ant", "bee", "cat", "dog", "eel", "fox") for _ in range(4)]
    conf = {"sbt.sentences": words, "sbt.pause_s": 1.0, "sbt.out_dir": str(tmp_path)}
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf=conf,
        node_kills=[NodeKill("node-2", at_s=1.5)],
        timeout_s=TIMEOUT_S,
    )
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_paused.py",
            ring=ring,
            options=options,
            kill_node=lambda node: lab.kill_nodes([node]),
        )
    finally:
        ring.close()
    assert report.idle is True
    assert report.recoveries == []
    assert sorted(report.outputs["count_bolt"].values()) == sorted(
        [w, words.count(w)] for w in set(words)
    )
