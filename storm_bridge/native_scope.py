"""What a native-mode rollback restores, and why (``sr3.recovery.scope`` on Storm).

Under ``global`` every stateful task restores the last commit. Under ``task``
(the default) only the tasks that lost their state restore it: the owners whose
process restarted and has not restored since. Every spout still seeks to the
commit's offsets; the other owners keep their state and drop what they already
processed (:class:`~storm_bridge.lineage.Dedupe`). Each owner says at the
ROLLBACK step what that needs (:meth:`OwnerScopeFacts.report`);
:func:`decide_native_scope` falls back to ``global`` where it cannot be exact,
with the reason. ``docs/storm.md`` lists the fallbacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from topology_api.barriers import internal_stream

__all__ = [
    "GLOBAL",
    "SCOPE_KEY",
    "TASK",
    "NativeScope",
    "OwnerScopeFacts",
    "decide_native_scope",
    "order_reason",
    "replays_overdue",
]

#: Conf key of the recovery scope.
SCOPE_KEY: Final = "sr3.recovery.scope"
TASK: Final = "task"
GLOBAL: Final = "global"


@dataclass(frozen=True)
class NativeScope:
    """One rollback's scope: the owners to restore (None: every one) and why."""

    scope: str
    restore: tuple[str, ...] | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The coordinator statistics' entry for the rollback."""
        return {
            "scope": self.scope,
            "restore": None if self.restore is None else list(self.restore),
            "reason": self.reason,
        }


def order_reason(
    component: str,
    context: Mapping[str, Any],
    *,
    nondeterministic: bool,
) -> str | None:
    """Why a restored task of ``component`` could emit other tuples than before.

    A restored task replays its input from the spouts in an order Storm does
    not log (no determinants: tuples of several upstream tasks interleave
    anew), so what it emits can differ from the first time: a running count,
    or a join's output anchored on whichever side came second, and with it the
    lineage a downstream task drops duplicates by. Such a task that emits to
    other components is restored only with everything downstream of it:
    globally. A task that emits nothing (a sink of state) ends in a state some
    failure-free order gives. None: no such risk.

    Args:
        component: The owner's component.
        context: The task's handshake context (Storm's ``stream->target->grouping``).
        nondeterministic: The class declares ``sr3_nondeterministic = True``.
    """
    if nondeterministic:
        return f"{component} declares sr3_nondeterministic = True"
    targets = sorted(
        {
            str(target)
            for stream, by_target in (
                context.get("stream->target->grouping") or {}
            ).items()
            if not internal_stream(str(stream))
            for target in (by_target or {})
        }
    )
    if not targets:
        return None
    return (
        f"{component} emits to {', '.join(targets)}: a restored task replays its "
        "input in an order Storm does not log, so its emits could differ from "
        "those its downstreams already processed"
    )


@dataclass(frozen=True)
class OwnerScopeFacts:
    """What one owner reports at the ROLLBACK step."""

    #: Restarted and not restored since: its state is gone.
    fresh: bool
    #: Every tuple it processed since the last commit carried a lineage.
    traced: bool
    #: Its buffer of emits went over ``sr3.recovery.buffer.bytes``.
    over: bool
    #: Why its restore alone could be inexact (None: it would not).
    order: str | None

    def report(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        """The ROLLBACK report."""
        return {
            **extra,
            "fresh": self.fresh,
            "traced": self.traced,
            "over": self.over,
            "order": self.order,
        }


def decide_native_scope(
    scope: str,
    reports: Mapping[str, Mapping[str, Any]],
    owners: Sequence[str],
    *,
    forced: str | None = None,
) -> NativeScope:
    """Return what a rollback restores.

    Args:
        scope: ``sr3.recovery.scope``.
        reports: The owners' ROLLBACK reports, by owner.
        owners: The registered owners.
        forced: Why the coordinator rolled back globally itself (None: it did
            not; see :func:`replays_overdue`).
    """
    if scope != TASK:
        return NativeScope(GLOBAL, None, "sr3.recovery.scope is global")
    if forced is not None:
        return NativeScope(GLOBAL, None, forced)
    for owner in owners:
        report = dict(reports.get(owner) or {})
        if report.get("traced") is not True:
            return NativeScope(
                GLOBAL,
                None,
                f"{owner} processed tuples without a lineage since the last commit "
                "(an unanchored emit, a Java bolt, a spout without offsets, the "
                "local cluster's native mode, or sr3.storm.generation.field=false): "
                "it could not tell their replays",
            )
        if report.get("over") is True:
            return NativeScope(
                GLOBAL,
                None,
                f"{owner} kept more emits since the last commit than "
                "sr3.recovery.buffer.bytes allows",
            )
    fresh = sorted(o for o in owners if dict(reports.get(o) or {}).get("fresh"))
    for owner in fresh:
        order = dict(reports[owner]).get("order")
        if order:
            return NativeScope(GLOBAL, None, f"{owner} restarted and {order}")
    if not fresh:
        return NativeScope(
            TASK,
            (),
            "no task lost its state (a tree failed): none restores; the spouts "
            "replay from the commit and every owner drops what it processed",
        )
    return NativeScope(
        TASK,
        tuple(fresh),
        f"only the restarted tasks restore ({', '.join(fresh)}); the others keep "
        "their state and drop the replayed tuples they processed",
    )


def replays_overdue(due: Mapping[str, int], waited_s: float) -> str:
    """Why a rollback that kept some owners' state is undone globally.

    An owner that kept its state had processed tuples ahead of the replay; its
    snapshot would hold them before the spouts' offsets do, so no epoch opens
    until their replay came. One that never comes (a poison tuple skipped, a
    bolt upstream emitting otherwise on replay) would stop every commit: after
    ``sr3.checkpoint.timeout.s`` every owner restores instead.
    """
    owner = max(due, key=lambda o: due[o])
    return (
        f"{owner} still awaited the replay of {due[owner]} tuples it processed "
        f"before the rollback after {waited_s:.0f} s (a poison tuple skipped, or "
        "a bolt upstream that emits otherwise on replay): every owner restores"
    )
