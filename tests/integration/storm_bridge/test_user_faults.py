"""Mistakes users make in their components, and what the local cluster tells them.

Each runs real ``streamparse_run`` tasks on a :class:`LocalCluster`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sr3.config import Sr3Config, ZkConfig
from storm_bridge.cluster import EventKind, LocalCluster
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess

pytestmark = [pytest.mark.storm]

TOPOLOGIES = Path(__file__).parent / "topologies"


@pytest.fixture
def ring(zk_config: ZkConfig) -> Iterator[RingAccess]:
    """ZooKeeper only: runs without checkpoints need no ring node."""
    access = RingAccess(Sr3Config(zk=zk_config))
    yield access
    access.close()


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_a_bolt_printing_to_stdout_dies_with_the_cause_named(
    make_cluster: Callable[..., LocalCluster], serializer: str
) -> None:
    cluster = make_cluster(
        "sbt_stdout", {"sbt.sentences": ["hello"]}, serializer=serializer
    )
    cluster.start()
    assert cluster.wait_for(lambda c: bool(c.errors()), 30.0)
    error = str(cluster.errors()[0])
    assert error.startswith("component 'printing_bolt' task ")
    assert "print()" in error
    assert "sys.stderr" in error
    (died, *_) = cluster.events(EventKind.TASK_DIED, "printing_bolt")
    assert "stdout is the multilang channel" in died.message


@pytest.mark.zk
def test_a_run_with_chatty_logs_ends_once_its_killed_tasks_came_back(
    ring: RingAccess,
) -> None:
    # the logs between the two kills overflow the event log's bound: the run
    # must still know the first killed task died and came back
    options = RunOptions(
        until_idle=True,
        checkpoints=False,
        conf={"sbt.count": 8, "sbt.pace_s": 0.5, "sbt.logs_per_tuple": 3000},
        kills=[
            TaskKill("chatty_bolt", 0, at_s=0.5),
            TaskKill("chatty_bolt", 1, at_s=3.5),
        ],
        timeout_s=30.0,
    )
    report = run_topology(TOPOLOGIES / "sbt_chatty.py", ring=ring, options=options)
    assert report.idle is True, report.busy
    assert report.counters["chatty_bolt"]["restarts"] == 2
    assert report.task_failures == []  # killed on request, not on their own
