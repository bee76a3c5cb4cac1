"""A Spark run's rebalance service, its report entries, and what reaches the tasks.

No Spark session and no ZooKeeper: the service's store gets a mock session
(nothing here reaches it), and the sink's gate refuses a batch before it
touches the frame.
"""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock

import pytest

from spark_bridge.compiler import plan_topology
from spark_bridge.errors import QueryPausedError
from spark_bridge.rebalancing import SparkRebalance, SparkRebalancing, components_of
from spark_bridge.rows import ComponentRef
from spark_bridge.sink import BatchSink
from topology_api.errors import TopologyError
from topology_api.rebalance_plan import ComponentInfo, RebalanceRequestError
from topology_api.topology import load_topology
from zk.rebalances import RebalanceRequest

TOPOLOGY = Path(__file__).parents[2] / "e2e" / "topologies" / "spark_rebalance.py"


def service(clock: list[float]) -> SparkRebalancing:
    components = {
        "lines": ComponentInfo(1, stateful=False, max_tasks=256),
        "count": ComponentInfo(2, stateful=True, max_tasks=8),
    }
    return SparkRebalancing(MagicMock(), "wc", components, clock=lambda: clock[0])


def request(request_id: str, **targets: int) -> RebalanceRequest:
    return RebalanceRequest(request_id=request_id, targets=targets)


def test_an_accepted_request_is_queued_once_and_others_wait_for_it() -> None:
    clock = [10.0]
    rebalancing = service(clock)
    rebalancing._accept(request("a", count=3))
    assert rebalancing.pending()
    assert rebalancing.in_progress()
    with pytest.raises(RebalanceRequestError, match="already rebalancing"):
        rebalancing._accept(request("b", count=1))
    taken = rebalancing.take()
    assert taken is not None
    assert taken.targets == {"count": (2, 3)}
    assert rebalancing.take() is None
    assert rebalancing.in_progress()  # taken, not done
    taken.stopped_at, taken.switched_at, taken.ended_at = 11.0, 12.0, 13.5
    assert not rebalancing.in_progress()
    rebalancing.switched({"count": ComponentInfo(3, stateful=True, max_tasks=8)})
    rebalancing._accept(request("c", count=1))
    assert rebalancing.take() is not None


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        ({"count": 9}, "1..8 tasks"),
        ({"count": 0}, "1..8 tasks"),
        ({"lines": 2}, "is stateless"),
        ({"nosuch": 2}, "has no component 'nosuch'"),
    ],
)
def test_a_bad_request_is_refused_and_changes_nothing(
    targets: dict[str, int], says: str
) -> None:
    rebalancing = service([0.0])
    with pytest.raises(RebalanceRequestError, match=says):
        rebalancing._accept(request("x", **targets))
    assert not rebalancing.pending()
    assert rebalancing.history == []


def test_a_request_to_the_current_count_is_done_at_once() -> None:
    rebalancing = service([5.0])
    rebalancing._accept(request("same", count=2))
    assert not rebalancing.pending()
    assert [e["phase"] for e in rebalancing.report()] == ["done"]


def test_the_report_entry_has_the_storm_engines_fields_and_the_pause() -> None:
    entry = SparkRebalance(
        "r1",
        {"count": (2, 3)},
        requested_at=100.0,
        stopped_at=100.5,
        switched_at=101.0,
        ended_at=103.0,
        epoch=7,
        bytes_moved=1234,
    ).to_dict(started=90.0)
    assert entry == {
        "id": "r1",
        "targets": {"count": {"from": 2, "to": 3}},
        "phase": "done",
        "epoch": 7,
        "attempts": 1,
        "start_s": 10.0,
        "switch_s": 11.0,
        "end_s": 13.0,
        "bytes_moved": 1234,
        "longest_key_pause_s": 2.5,
        "held_tuples": 0,
        "unmoved_processed": 0,
        "rollbacks": 0,
        "how": "restart",
    }
    running = SparkRebalance("r2", {"count": (3, 1)}, requested_at=1.0).to_dict()
    assert running["phase"] == "restarting"
    assert running["longest_key_pause_s"] == 0.0


def test_components_and_their_maximum_follow_the_loaded_counts() -> None:
    topology = load_topology(TOPOLOGY, parallelism={"count": 5})
    plan = plan_topology(topology, parallelism={"count": 5})
    found = components_of(topology, plan.stateful, {"sr3.state.key.groups": 64})
    assert found["count"] == ComponentInfo(5, stateful=True, max_tasks=64)
    assert found["split"].stateful is False
    assert plan.parallelism == (("count", 5),)


def test_a_parallelism_override_names_a_component_and_a_count_of_at_least_1() -> None:
    with pytest.raises(TopologyError, match="'nosuch'"):
        load_topology(TOPOLOGY, parallelism={"nosuch": 2})
    with pytest.raises(TopologyError, match="at 0 tasks"):
        load_topology(TOPOLOGY, parallelism={"count": 0})


def test_the_parallelism_reaches_every_task_through_the_component_ref() -> None:
    ref = ComponentRef(str(TOPOLOGY), "count", {}, None, (("count", 3),))
    assert ComponentRef.from_options(ref.to_options()) == ref


def test_a_paused_sink_refuses_a_batch_before_touching_it(tmp_path: Path) -> None:
    sink = BatchSink(tmp_path / "sink", None, frozenset({"lines"}))
    sink.pause()
    with pytest.raises(QueryPausedError, match="being restarted"):
        sink(MagicMock(side_effect=AssertionError), 0)
    sink.wait_idle()  # nothing under way
    assert sink.committed == 0
    assert not (tmp_path / "sink").exists()
    sink.resume(4)
    assert sink.batch_offset == 4
    assert sink.next_batch_number() == 0


def test_a_restart_that_failed_refuses_its_request_naming_the_failure() -> None:
    rebalancing = service([1.0])
    store = MagicMock()
    rebalancing._store = store
    rebalancing._accept(request("a", count=3))
    assert rebalancing.take() is not None  # the runner took it, then failed
    rebalancing.close("RecoveryError: shard 7 of wc/count/0 has no replica left")
    refusals = [c.kwargs for c in store.update.call_args_list if c.kwargs.get("state")]
    assert [r["state"] for r in refusals] == ["refused"]
    assert "failed before the rebalance finished" in refusals[0]["detail"]
    assert "shard 7 of wc/count/0" in refusals[0]["detail"]
    assert "--resume" in refusals[0]["detail"]


def test_a_rebalance_done_as_the_run_ends_is_reported_done_not_refused() -> None:
    rebalancing = service([1.0])
    store = MagicMock()
    rebalancing._store = store
    rebalancing._accept(request("a", count=3))
    taken = rebalancing.take()
    assert taken is not None
    taken.stopped_at, taken.switched_at, taken.ended_at = 2.0, 3.0, 4.0
    rebalancing.close()
    states = [c.kwargs.get("state") for c in store.update.call_args_list]
    assert states == ["done"]
