"""Planning an owner's transfer: what the eager recovery and the lazy restore share.

:func:`shards_to_read` picks the chain's shards a restore reads (every restore
path reads through it), :func:`planner_inputs` summarises them for the planner,
:data:`STRATEGIES` names the structures, and :class:`PlannedTransfer` is a
planned transfer the lazy restore runs in the background
(:meth:`~sr3.recovery.recover.Recoverer.plan_transfer` makes one).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sr3.manifest import Manifest, ShardMeta
from sr3.recovery.base import (
    EventHook,
    RecoveryContext,
    RecoveryStrategy,
    TransferJob,
    covering_holders,
)
from sr3.recovery.line import LineRecovery
from sr3.recovery.pieces import Assembly, Blob
from sr3.recovery.planner import PlanDecision, PlannerInputs
from sr3.recovery.star import StarRecovery
from sr3.recovery.tree import TreeRecovery

__all__ = [
    "BROKEN_BUILD_ENV",
    "STRATEGIES",
    "PlannedTransfer",
    "planner_inputs",
    "shards_to_read",
]

#: Test-only switch of a deliberately broken build: ``drop-delta`` makes every
#: recovery leave out the newest delta of each key group's chain, the kind of
#: bug the chaos campaign exists to catch (``tests/e2e/test_chaos_campaign.py``).
BROKEN_BUILD_ENV = "SR3_BROKEN_BUILD"

logger = logging.getLogger(__name__)

STRATEGIES: dict[str, type[RecoveryStrategy]] = {
    "star": StarRecovery,
    "line": LineRecovery,
    "tree": TreeRecovery,
}


def planner_inputs(
    shards: Sequence[ShardMeta],
    live: Mapping[str, object],
    context: RecoveryContext,
    *,
    configured: str,
    probes: Any = None,
) -> PlannerInputs:
    """Summarise a chain and the measured paths for :func:`plan_mechanism`.

    The merged size is estimated as the largest epoch of the chain (deltas mostly
    overwrite keys of the base).
    """
    per_epoch: dict[int, int] = {}
    for s in shards:
        per_epoch[s.epoch] = per_epoch.get(s.epoch, 0) + s.size
    holders = {h for s in shards for h in s.holders if h in live}
    kwargs: dict[str, Any] = {}
    if probes is not None:
        kwargs = {
            "rtt_s": probes.median_rtt_s(),
            "holder_bps": probes.median_bps(),
            "aggregate_bps": probes.aggregate_bps,
            "probed": bool(probes.bps),
        }
    return PlannerInputs(
        state_bytes=sum(per_epoch.values()),
        merged_bytes=max(per_epoch.values(), default=0),
        shard_count=len(shards),
        holder_count=len(holders),
        relay_holders=len(covering_holders(shards, live)) or None,
        chain_length=len(per_epoch),
        latency_target_s=context.recovery.latency_target_s,
        configured=configured,
        tree_fanout=context.recovery.tree_fanout,
        parallel=context.parallel,
        **kwargs,
    )


@dataclass
class PlannedTransfer:
    """A planned transfer of one owner's chain, as ``Recoverer.plan_transfer`` makes it.

    Attributes:
        context: How to reach the ring.
        owner: Whose chain.
        manifest: The manifest transferred.
        shards: Its shards to read, in chain order.
        live: The live nodes when planned.
        decision: The planner's choice and its reason.
    """

    context: RecoveryContext
    owner: str
    manifest: Manifest
    shards: list[ShardMeta]
    live: dict[str, Any]
    decision: PlanDecision

    def run(
        self,
        on_key_group: Callable[[int, list[Blob]], None],
        on_event: EventHook | None = None,
    ) -> Assembly:
        """Move the shards with the chosen structure, one round, no re-plan.

        ``on_key_group`` gets each key group's blobs (epoch order) as soon as
        they all arrived; what the round left missing is the assembly's
        :meth:`~sr3.recovery.pieces.Assembly.missing_shards`.
        """
        assembly = Assembly(self.manifest, self.shards, on_key_group=on_key_group)
        job = TransferJob(
            self.owner, self.shards, self.live, assembly, on_event=on_event
        )
        STRATEGIES[self.decision.mechanism](self.context).transfer(job)
        return assembly


def shards_to_read(shards: list[ShardMeta]) -> list[ShardMeta]:
    """Return the chain's shards a restore reads: all of them.

    Every restore path reads through this (eager recovery and the lazy
    loader), so the test-only :data:`BROKEN_BUILD_ENV` switch breaks them all:
    under ``drop-delta`` the newest delta's shards are left out.
    """
    deltas = [s.epoch for s in shards if s.kind == "delta"]
    if os.environ.get(BROKEN_BUILD_ENV) != "drop-delta" or not deltas:
        return shards
    newest = max(deltas)
    logger.warning(
        "%s=drop-delta: recovery drops delta epoch %d", BROKEN_BUILD_ENV, newest
    )
    return [s for s in shards if s.epoch != newest]
