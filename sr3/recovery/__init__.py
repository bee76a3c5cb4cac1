"""Star-, line- and tree-structured recovery of snapshots, and the planner.

Entry point: :class:`Recoverer` with a :class:`RecoveryContext`. Ring nodes serve
the relay ops through :class:`RelayOps`.
"""

from sr3.recovery.base import (
    RecoveryContext,
    RecoveryLifecycle,
    RecoveryPhase,
    RecoveryStrategy,
    Span,
    TransferJob,
)
from sr3.recovery.frames import RelayFaults
from sr3.recovery.line import LineRecovery
from sr3.recovery.pieces import Assembly, ChainIndex, Piece, merge_pieces
from sr3.recovery.planner import (
    PlanDecision,
    PlannerInputs,
    Prober,
    ProbeResult,
    plan_mechanism,
)
from sr3.recovery.recover import STRATEGIES, PlannedTransfer, Recoverer, RecoveryResult
from sr3.recovery.relay import RelayOps
from sr3.recovery.star import StarRecovery
from sr3.recovery.tree import TreeRecovery

__all__ = [
    "STRATEGIES",
    "Assembly",
    "ChainIndex",
    "LineRecovery",
    "Piece",
    "PlanDecision",
    "PlannerInputs",
    "ProbeResult",
    "Prober",
    "PlannedTransfer",
    "Recoverer",
    "RecoveryContext",
    "RecoveryLifecycle",
    "RecoveryPhase",
    "RecoveryResult",
    "RecoveryStrategy",
    "RelayFaults",
    "RelayOps",
    "Span",
    "StarRecovery",
    "TransferJob",
    "TreeRecovery",
    "merge_pieces",
    "plan_mechanism",
]
