"""The scope of a task failure's recovery on the local cluster, and why.

:func:`decide_scope` holds the rules; :meth:`LocalRecovery.decide
<storm_bridge.cluster.local_recovery.LocalRecovery.decide>` is the one place
that applies them (and other features' vetoes). ``docs/local-recovery.md``
explains each fallback.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from storm_bridge.cluster.rollbacks import is_replayable, is_stateful_bolt
from storm_bridge.cluster.tasks import TaskRuntime
from topology_api.contract import NONDETERMINISTIC_ATTR, is_nondeterministic_class

__all__ = [
    "NONDETERMINISTIC_ATTR",
    "RecoveryScope",
    "ScopeDecision",
    "Veto",
    "decide_ring_scope",
    "decide_scope",
]


class RecoveryScope(enum.Enum):
    """What a task failure rolls back (``sr3.recovery.scope``)."""

    TASK = "task"
    GLOBAL = "global"


@dataclass(frozen=True)
class ScopeDecision:
    """The scope of one recovery and why."""

    scope: RecoveryScope
    reason: str


#: Another feature's veto: a reason to recover ``rt`` globally, or None.
Veto = Callable[[TaskRuntime], str | None]


def _global(reason: str) -> ScopeDecision:
    return ScopeDecision(RecoveryScope.GLOBAL, reason)


def _global_anyway(
    scope: RecoveryScope, rolls_back: bool, global_restoring: bool, what: str
) -> ScopeDecision | None:
    """The fallbacks shared by task and ring-node failures (None: none applies)."""
    if scope is RecoveryScope.GLOBAL:
        return _global("sr3.recovery.scope is global")
    if not rolls_back:
        return _global(
            "nothing to restore or seek (no stateful bolt or replayable spout)"
        )
    if global_restoring:
        return _global(f"a global rollback is under way: {what} joins it")
    return None


def decide_scope(
    rt: TaskRuntime,
    *,
    scope: RecoveryScope,
    rolls_back: bool,
    global_restoring: bool,
    vetoes: Sequence[Veto] = (),
) -> ScopeDecision:
    """Return the scope of the recovery of ``rt``'s failure, and why.

    Args:
        rt: The failed task.
        scope: ``sr3.recovery.scope``.
        rolls_back: Whether the topology has anything to restore or seek.
        global_restoring: A global rollback is under way, not yet restored.
        vetoes: Other features' reasons to recover ``rt`` globally.
    """
    name = rt.component.name
    common = _global_anyway(scope, rolls_back, global_restoring, "the failure")
    if common is not None:
        return common
    if rt.is_spout and not is_replayable(rt):
        return _global(f"{name} is a plain spout: it cannot seek to a committed offset")
    if is_nondeterministic_class(rt.component.component_cls):
        return _global(f"{name} declares {NONDETERMINISTIC_ATTR} = True")
    if is_stateful_bolt(rt) and not rt.conf.get("sr3.zk.hosts"):
        return _global(f"{name} keeps its state in memory only (no ring)")
    for veto in vetoes:
        reason = veto(rt)
        if reason is not None:
            return _global(reason)
    return ScopeDecision(RecoveryScope.TASK, "only the failed task restores")


def decide_ring_scope(
    *, scope: RecoveryScope, rolls_back: bool, global_restoring: bool
) -> ScopeDecision:
    """Return what a ring node leaving the ring rolls back, and why.

    No task lost anything: the tasks keep their state in memory, the committed
    epochs keep r-1 live replicas and the ring repairs them to r. Under task
    scope the topology therefore goes on; only the open epoch is abandoned (its
    snapshots were being written while the ring changed). A write that missed
    its quorum kills its task, which then recovers alone like any failed task.

    Args:
        scope: ``sr3.recovery.scope``.
        rolls_back: Whether the topology has anything to restore or seek.
        global_restoring: A global rollback is under way, not yet restored
            (its restores may have been reading from the node).
    """
    common = _global_anyway(scope, rolls_back, global_restoring, "the ring change")
    if common is not None:
        return common
    return ScopeDecision(
        RecoveryScope.TASK,
        "no task failed: the ring keeps r-1 replicas and repairs; open epoch abandoned",
    )
