"""Task scope in native mode: which owners a rollback restores, and why."""

from __future__ import annotations

from typing import Any

from storm_bridge.native import OWNER, SPOUT, BoltAgent
from storm_bridge.native_coordinator import NativeCoordinator
from storm_bridge.native_scope import (
    GLOBAL,
    TASK,
    OwnerScopeFacts,
    decide_native_scope,
    order_reason,
)
from tests.unit.storm_bridge.test_native import Clock, MemoryStore
from tests.unit.storm_bridge.test_native_agents import _coordinator
from zk.epoch_control import EpochControl, Phase, replay_step

OWNERS = ["wc/count/0", "wc/count/1"]


def _facts(
    *,
    fresh: bool = False,
    traced: bool = True,
    over: bool = False,
    order: str | None = None,
) -> dict[str, Any]:
    return OwnerScopeFacts(fresh=fresh, traced=traced, over=over, order=order).report(
        {}
    )


def test_only_the_restarted_owners_restore_under_task_scope() -> None:
    reports = {"wc/count/0": _facts(fresh=True), "wc/count/1": _facts()}
    scope = decide_native_scope(TASK, reports, OWNERS)
    assert (scope.scope, scope.restore) == (TASK, ("wc/count/0",))
    assert "wc/count/0" in scope.reason


def test_a_failed_tree_with_no_restart_restores_no_owner() -> None:
    reports = {o: _facts() for o in OWNERS}
    scope = decide_native_scope(TASK, reports, OWNERS)
    assert (scope.scope, scope.restore) == (TASK, ())
    assert "no task lost its state" in scope.reason


def test_every_fallback_to_global_names_the_owner_and_its_reason() -> None:
    cases = [
        ({"wc/count/1": _facts(traced=False)}, "without a lineage"),
        ({"wc/count/1": _facts(over=True)}, "sr3.recovery.buffer.bytes"),
        (
            {"wc/count/0": _facts(fresh=True, order="count emits to sink: ...")},
            "restarted and count emits to sink",
        ),
    ]
    for changed, why in cases:
        reports = {o: _facts() for o in OWNERS} | changed
        scope = decide_native_scope(TASK, reports, OWNERS)
        assert (scope.scope, scope.restore) == (GLOBAL, None), why
        assert why in scope.reason
        assert next(iter(changed)) in scope.reason
    configured = decide_native_scope(GLOBAL, {o: _facts() for o in OWNERS}, OWNERS)
    assert (configured.restore, configured.reason) == (
        None,
        "sr3.recovery.scope is global",
    )
    # an owner that said nothing cannot drop replays: global, not a guess
    missing = decide_native_scope(TASK, {"wc/count/0": _facts()}, OWNERS)
    assert missing.restore is None


def test_an_owner_that_emits_downstream_cannot_restore_alone() -> None:
    context = {
        "stream->target->grouping": {
            "default": {"ledger": {"type": "FIELDS"}},
            "_sr3_barrier": {"ledger": {"type": "ALL"}},
        }
    }
    reason = order_reason("join", context, nondeterministic=False)
    assert reason is not None
    assert "join emits to ledger" in reason
    sink = {"stream->target->grouping": {"default": {}, "__metrics": {"m": {}}}}
    assert order_reason("count", sink, nondeterministic=False) is None
    declared = order_reason("count", sink, nondeterministic=True)
    assert declared == "count declares sr3_nondeterministic = True"


def _rolled_back(scope: str) -> tuple[NativeCoordinator, MemoryStore, Clock]:
    store, clock = MemoryStore(), Clock()
    coordinator = _coordinator(store, clock, scope)
    coordinator.step()
    store.bump_generation()
    assert coordinator.step().phase is Phase.ROLLBACK
    store.report_all(store.registered(SPOUT), {"offset": 3})
    return coordinator, store, clock


def test_under_task_scope_a_rollback_waits_for_owners_and_names_whom_to_restore() -> (
    None
):
    coordinator, store, _clock = _rolled_back(TASK)
    assert coordinator.step().phase is Phase.ROLLBACK  # the owners have not said
    store.report_all({"wc/count/0"}, _facts(fresh=True))
    store.report_all({"wc/count/1"}, _facts())
    restore = coordinator.step()
    assert (restore.phase, restore.restore) == (Phase.RESTORE, ("wc/count/0",))
    entry = restore.stats["scopes"]["1"]
    assert (entry["scope"], entry["restore"]) == (TASK, ["wc/count/0"])
    assert EpochControl.from_dict(restore.to_dict()) == restore


def test_under_global_scope_the_rollback_restores_every_owner_as_before() -> None:
    coordinator, store, _clock = _rolled_back(GLOBAL)
    restore = coordinator.step()  # the spouts' reports are enough
    assert (restore.phase, restore.restore) == (Phase.RESTORE, None)
    assert restore.restores("wc/count/1")
    assert store.registered(OWNER) == set(OWNERS)


def test_an_owner_not_named_keeps_its_state_and_fences_older_generations() -> None:
    agent = BoltAgent(bumped=False, owner="wc/count/1")
    agent.action(EpochControl(Phase.RUNNING, 4, 0))
    rollback = EpochControl(Phase.ROLLBACK, 5, 1)
    assert agent.action(rollback) == BoltAgent.REPORT
    agent.done(rollback, BoltAgent.REPORT)
    assert agent.action(rollback) is None  # once per step
    restore = EpochControl(Phase.RESTORE, 5, 1, restore=("wc/count/0",))
    assert agent.action(restore) == BoltAgent.KEEP
    agent.done(restore, BoltAgent.KEEP)
    # a straggler of generation 0 is stale for it too: its replay comes in 1
    assert agent.stale(0) is True
    assert agent.stale(1) is False
    assert agent.action(EpochControl(Phase.SNAPSHOT, 6, 1)) == BoltAgent.SNAPSHOT


def test_a_restarted_owner_always_restores() -> None:
    agent = BoltAgent(bumped=True, owner="wc/count/0")
    agent.min_generation = 1
    assert agent.fresh
    restore = EpochControl(Phase.RESTORE, 5, 1, restore=())
    assert agent.action(restore) == BoltAgent.RESTORE
    agent.done(restore, BoltAgent.RESTORE)
    assert not agent.fresh
    assert agent.stale(0) is True


def _resumed_keeping(store: MemoryStore, coordinator: NativeCoordinator) -> None:
    store.report_all({"wc/count/0"}, _facts(fresh=True))
    store.report_all({"wc/count/1"}, _facts())
    assert coordinator.step().phase is Phase.RESTORE
    store.report_all(set(OWNERS), {"fenced": True})
    assert coordinator.step().phase is Phase.RUNNING


def test_no_epoch_opens_while_a_kept_owner_awaits_replays_of_what_it_processed() -> (
    None
):
    coordinator, store, clock = _rolled_back(TASK)
    _resumed_keeping(store, coordinator)
    # count/1 processed tuples ahead of the replay: its snapshot would hold
    # them before the spouts' offsets do
    store.by_step[replay_step(1)] = {"wc/count/1": {"due": 40}}
    clock.now += 5.0
    assert coordinator.step().phase is Phase.RUNNING
    store.by_step[replay_step(1)] = {"wc/count/1": {"due": 0}}
    assert coordinator.step().phase is Phase.PAUSE


def test_replays_that_never_come_end_in_a_global_rollback_saying_why() -> None:
    coordinator, store, clock = _rolled_back(TASK)
    _resumed_keeping(store, coordinator)
    store.by_step[replay_step(1)] = {"wc/count/1": {"due": 3}}
    clock.now += 10.0  # the coordinator's timeout_s
    assert coordinator.step().phase is Phase.RUNNING
    assert store.generation() == 2
    rollback = coordinator.step()
    assert (rollback.phase, rollback.generation) == (Phase.ROLLBACK, 2)
    store.report_all(store.registered(SPOUT), {"offset": 3})
    store.report_all(set(OWNERS), _facts())
    restore = coordinator.step()
    assert (restore.phase, restore.restore) == (Phase.RESTORE, None)
    reason = restore.stats["scopes"]["2"]["reason"]
    assert "wc/count/1 still awaited the replay of 3 tuples" in reason
