"""Recovering an owner's committed snapshot into this process (R), end to end.

:meth:`Recoverer.recover` reads the manifest, asks the planner for a structure
(or takes the configured one), moves the shards with it, re-plans whatever a
failed holder left missing (star over the remaining holders), installs the key
groups into a :class:`~sr3.state.KeyedState` (lazily by default), and reports the
mechanism, the reason, bytes, holders, re-plans and a timeline in a
:class:`RecoveryResult`. What it shares with the lazy restore (the shards read,
the planner's inputs, the structures by name, a planned transfer) lives in
:mod:`sr3.recovery.transfer_plan`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sr3.codec import decode_key, decode_key_group_raw
from sr3.errors import RecoveryError, SR3Error
from sr3.manifest import Manifest, ShardMeta
from sr3.recovery.base import (
    EventHook,
    RecoveryContext,
    RecoveryLifecycle,
    RecoveryPhase,
    Span,
    TransferJob,
)
from sr3.recovery.pieces import Assembly, Blob, shard_metas_in_order
from sr3.recovery.planner import PlanDecision, Prober, plan_mechanism
from sr3.recovery.star import StarRecovery
from sr3.recovery.transfer_plan import (
    STRATEGIES,
    PlannedTransfer,
    planner_inputs,
    shards_to_read,
)
from sr3.replication import report_corrupt
from sr3.state import KeyedState

__all__ = ["Recoverer", "RecoveryResult"]

logger = logging.getLogger(__name__)


@dataclass
class RecoveryResult:
    """What a recovery did and what it rebuilt.

    Attributes:
        owner: The owner recovered.
        epoch: The epoch rebuilt (the latest committed unless one was asked for).
        mechanism: The structure of the first transfer.
        reason: Why it was chosen.
        state: The rebuilt keyed state.
        shards: Shards in the manifest's chain.
        state_bytes: Bytes of those shards.
        bytes_received: Bytes R received (merged pieces count as sent).
        holders_used: Nodes that sent data, directly or through a relay.
        served_by: Bytes delivered to R per node that connected to R.
        failed_holders: Nodes that failed during the recovery.
        replans: Transfer rounds after the first.
        duplicates: Pieces dropped as already held.
        timeline: Phases with start and end times.
        time_to_resume_s: From the start until R served a read of a key.
        transfer_s: Seconds spent moving bytes, re-plans included.
        lazy: Whether key groups stayed encoded at install.
        structure: Who connected to whom in the first transfer.
        predicted_s: The planner's predictions (auto only).
    """

    owner: str
    epoch: int
    mechanism: str
    reason: str
    state: KeyedState
    shards: int
    state_bytes: int
    bytes_received: int
    holders_used: list[str]
    served_by: dict[str, int]
    failed_holders: list[str]
    replans: int
    duplicates: int
    timeline: list[Span]
    time_to_resume_s: float
    transfer_s: float
    lazy: bool
    structure: dict[str, Any] = field(default_factory=dict)
    predicted_s: Mapping[str, float] = field(default_factory=dict)
    layers: dict[int, list[Blob]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-friendly report (without the state)."""
        return {
            "owner": self.owner,
            "epoch": self.epoch,
            "mechanism": self.mechanism,
            "reason": self.reason,
            "shards": self.shards,
            "state_bytes": self.state_bytes,
            "bytes_received": self.bytes_received,
            "holders_used": self.holders_used,
            "served_by": self.served_by,
            "failed_holders": self.failed_holders,
            "replans": self.replans,
            "duplicates": self.duplicates,
            "timeline": [s.to_dict() for s in self.timeline],
            "time_to_resume_s": round(self.time_to_resume_s, 6),
            "transfer_s": round(self.transfer_s, 6),
            "lazy": self.lazy,
            "structure": self.structure,
            "predicted_s": {k: round(v, 6) for k, v in self.predicted_s.items()},
        }


class Recoverer:
    """Recovers owners' snapshots into this process.

    Args:
        context: How to reach the ring, and the recovery config.
        prober: Measures paths for ``auto`` (default: one over the context's pool).
        sleep: Waits between re-plans (injectable for tests).
    """

    def __init__(
        self,
        context: RecoveryContext,
        *,
        prober: Prober | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.context = context
        self.prober = prober or Prober(context.pool, context.node_config)
        self._sleep = sleep

    def recover(
        self,
        owner: str,
        *,
        mechanism: str | None = None,
        epoch: int | None = None,
        lazy: bool | None = None,
        on_event: EventHook | None = None,
    ) -> RecoveryResult:
        """Rebuild ``owner``'s snapshot (latest committed epoch by default).

        Args:
            owner: Whose snapshot.
            mechanism: star, line, tree or auto (default: the configured one).
            epoch: An older committed epoch instead of the latest.
            lazy: Keep key groups encoded until touched (default: configured).
            on_event: Hook for ``plan``, ``data``, ``lost`` and ``replan`` events.

        Raises:
            RecoveryError: no committed snapshot, or shards no live holder served.
            CoordinationError: the manifest store failed.
        """
        life = RecoveryLifecycle()
        try:
            return self._recover(owner, mechanism, epoch, lazy, on_event, life)
        except SR3Error:
            life.move(RecoveryPhase.FAILED)
            raise

    def _recover(
        self,
        owner: str,
        mechanism: str | None,
        epoch: int | None,
        lazy: bool | None,
        on_event: EventHook | None,
        life: RecoveryLifecycle,
    ) -> RecoveryResult:
        cfg = self.context.recovery
        lazy = cfg.lazy_install if lazy is None else lazy
        life.move(RecoveryPhase.PLANNING)
        manifest = self._manifest(owner, epoch)
        shards = shards_to_read(
            shard_metas_in_order(manifest, self.context.manifests.shards(owner))
        )
        live = dict(self.context.members())
        decision = self._decide(shards, live, mechanism or cfg.mechanism)
        logger.info("recovery of %s@%s: %s", owner, manifest.epoch, decision.reason)
        assembly = Assembly(manifest, shards)
        life.annotate(decision.reason)

        life.move(RecoveryPhase.TRANSFERRING, decision.mechanism)
        transfer_start = life.now()
        job = TransferJob(owner, shards, live, assembly, on_event=on_event)
        STRATEGIES[decision.mechanism](self.context).transfer(job)
        structure = dict(job.structure)
        replans = self._replan(owner, job, assembly, life, on_event)
        transfer_s = life.now() - transfer_start

        life.move(RecoveryPhase.INSTALLING, "lazy" if lazy else "eager")
        layers = assembly.layers()
        state = KeyedState(manifest.key_group_count)
        for layer in assembly.install_order():
            state.install(layer, lazy=lazy)
        life.move(RecoveryPhase.RESUMED)
        _first_read(state, layers)
        resume_s = life.now()
        life.finish()
        # after resume, off the critical path: holders that served bad bytes
        # re-check and quarantine them, and repair copies good replicas back
        for node_id, shard_id in sorted(set(job.corrupt)):
            node = job.live.get(node_id)
            if node is not None:
                report_corrupt(self.context.pool, node, shard_id)
        holders = set(job.served_by)
        for nodes in (structure.get("nodes", ()),):
            holders.update(n for n in nodes if n not in job.failed)
        return RecoveryResult(
            owner=owner,
            epoch=manifest.epoch,
            mechanism=decision.mechanism,
            reason=decision.reason,
            state=state,
            shards=len(shards),
            state_bytes=sum(s.size for s in shards),
            bytes_received=assembly.bytes_received,
            holders_used=sorted(holders),
            served_by=dict(sorted(job.served_by.items())),
            failed_holders=sorted(job.failed),
            replans=replans,
            duplicates=assembly.duplicates,
            timeline=list(life.timeline),
            time_to_resume_s=resume_s,
            transfer_s=transfer_s,
            lazy=lazy,
            structure=structure,
            predicted_s=decision.predicted_s,
            layers=layers,
        )

    def plan_transfer(
        self, owner: str, *, mechanism: str | None = None, epoch: int | None = None
    ) -> PlannedTransfer:
        """Plan ``owner``'s transfer as :meth:`recover` does, without running it.

        The lazy restore runs the plan in the background
        (:meth:`PlannedTransfer.run`) while the task already processes.

        Raises:
            RecoveryError: no committed snapshot, or a shard has no record.
            CoordinationError: the manifest store failed.
        """
        manifest = self._manifest(owner, epoch)
        shards = shards_to_read(
            shard_metas_in_order(manifest, self.context.manifests.shards(owner))
        )
        live = dict(self.context.members())
        decision = self._decide(
            shards, live, mechanism or self.context.recovery.mechanism
        )
        logger.info("transfer of %s@%s: %s", owner, manifest.epoch, decision.reason)
        return PlannedTransfer(self.context, owner, manifest, shards, live, decision)

    def _manifest(self, owner: str, epoch: int | None) -> Manifest:
        if epoch is not None:
            return self.context.manifests.manifest(owner, epoch)
        latest = self.context.manifests.latest(owner)
        if latest is None:
            msg = f"owner {owner!r} has no committed snapshot to recover; write one"
            raise RecoveryError(msg)
        return latest

    def _decide(
        self, shards: Sequence[ShardMeta], live: Mapping[str, Any], configured: str
    ) -> PlanDecision:
        probes = None
        if configured == "auto":
            holders = {h for s in shards for h in s.holders if h in live}
            probes = self.prober.measure({h: live[h] for h in sorted(holders)})
        inputs = planner_inputs(
            shards, live, self.context, configured=configured, probes=probes
        )
        return plan_mechanism(inputs)

    def _replan(
        self,
        owner: str,
        job: TransferJob,
        assembly: Assembly,
        life: RecoveryLifecycle,
        on_event: EventHook | None,
    ) -> int:
        """Fetch what the first transfer left missing; return the re-plans made."""
        rounds = 0
        while True:
            missing = assembly.missing_shards()
            if not missing:
                return rounds
            if rounds >= self.context.max_rounds or _ruined(missing, assembly, job):
                raise RecoveryError(_unserved(owner, missing, rounds, job))
            rounds += 1
            detail = f"{len(missing)} shards missing; failed {sorted(job.failed)}"
            life.move(RecoveryPhase.REPLANNING, detail)
            logger.warning("recovery of %s re-plans: %s", owner, detail)
            if on_event is not None:
                on_event("replan", {"round": rounds, "missing": missing})
            if rounds > 1:  # let repair re-replicate what the failed holders held
                self._sleep(min(self.context.retry_backoff_s * 2 ** (rounds - 2), 5.0))
            live = dict(self.context.members())
            # holders may have changed: repair copies a dead holder's shards
            fresh = self.context.manifests.shards(owner)
            job.shards = [fresh.get(sid, assembly.metas[sid]) for sid in missing]
            job.live = live
            life.move(RecoveryPhase.TRANSFERRING, f"star round {rounds + 1}")
            StarRecovery(self.context).transfer(job)


def _ruined(missing: list[str], assembly: Assembly, job: TransferJob) -> bool:
    """Whether every holder of a missing shard served a corrupt copy of it.

    Those copies are quarantined and no good one is left for repair to copy,
    so no re-plan can serve the shard: the recovery fails at once.
    """
    corrupt = set(job.corrupt)
    return any(
        all((node_id, sid) in corrupt for node_id in assembly.metas[sid].holders)
        for sid in missing
    )


def _unserved(owner: str, missing: list[str], rounds: int, job: TransferJob) -> str:
    """The error for shards still missing after the last re-plan, with the cause."""
    corrupt: dict[str, set[str]] = {}
    for node_id, shard_id in job.corrupt:
        corrupt.setdefault(shard_id, set()).add(node_id)
    head = f"recovery of {owner}: shards {missing[:5]} ({len(missing)} in all)"
    ruined = [sid for sid in missing if sid in corrupt]
    if ruined:
        sid = ruined[0]
        served = "cannot be served"
        if rounds:
            served = f"were not served after {rounds} re-plans"
        return (
            f"{head} {served}: every copy read of "
            f"{sid} failed its checksum (on {', '.join(sorted(corrupt[sid]))}; "
            f"{len(ruined)} shards like it) and no other replica is left; the "
            "corrupt copies are quarantined on their nodes: recover an earlier "
            "epoch (--epoch) or write the state again"
        )
    return (
        f"{head} were not served after {rounds} re-plans (failed holders "
        f"{sorted(job.failed)}); restart holders or wait for repair"
    )


def _first_read(state: KeyedState, layers: Mapping[int, list[Blob]]) -> None:
    """Serve a read of one key, as a resumed task would (decodes its key group).

    The key is taken from the smallest key group, so finding it costs little.
    """
    by_size = sorted(layers, key=lambda kg: sum(len(b) for b in layers[kg]))
    for kg in by_size:
        for blob in reversed(layers[kg]):
            entries = decode_key_group_raw(blob).entries
            if entries:
                state.for_key(decode_key(next(iter(entries)))).get("v")
                return
