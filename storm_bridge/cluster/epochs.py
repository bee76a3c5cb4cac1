"""Commit bookkeeping of the local cluster's global epochs.

An :class:`OpenEpoch` knows who still owes a report: every spout task its
barrier (with its offset), every stateful task the report of its durable
snapshot. Once nobody owes one it can commit, and becomes an
:class:`EpochStats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpochStats", "OpenEpoch"]


@dataclass
class EpochStats:
    """A committed epoch.

    Attributes:
        epoch: Its number.
        opened_at: Clock reading when it opened.
        committed_at: Clock reading when it committed.
        reports: What each stateful task reported, by owner.
    """

    epoch: int
    opened_at: float
    committed_at: float
    reports: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """Seconds from open to commit."""
        return self.committed_at - self.opened_at


@dataclass
class OpenEpoch:
    """The open epoch: who still owes a report, and what reported.

    Attributes:
        epoch: Its number.
        opened_at: Clock reading when it opened.
        spouts: Spout tasks whose barrier has not come yet.
        stateful: Stateful tasks whose snapshot is not durable yet.
        offsets: Offset of every spout task that emitted its barrier, by owner.
        reports: Snapshot report of every stateful task, by owner.
        injections: Plain spout tasks whose barrier waits for their next sync.
    """

    epoch: int
    opened_at: float
    spouts: set[int]
    stateful: set[int]
    offsets: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)
    injections: set[int] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        """Whether every spout and stateful task reported (it can commit)."""
        return not self.spouts and not self.stateful

    def spout_reported(self, task_id: int, owner: str, offset: Any) -> None:
        """Note the barrier (and offset) of spout task ``task_id``, one it owed."""
        self.offsets[owner] = offset
        self.spouts.discard(task_id)

    def snapshot_reported(self, task_id: int, owner: str, report: Any) -> None:
        """Note the durable snapshot of stateful task ``task_id``, one it owed."""
        self.reports[owner] = report
        self.stateful.discard(task_id)

    def stats(self, committed_at: float) -> EpochStats:
        """Return the record of this epoch committed at ``committed_at``."""
        return EpochStats(self.epoch, self.opened_at, committed_at, dict(self.reports))
