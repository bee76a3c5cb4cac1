"""Star-, line- and tree-structured recovery of snapshots, and the planner.

Entry point: :class:`Recoverer` with a :class:`RecoveryContext`. Ring nodes serve
the relay ops through :class:`RelayOps`.

The names below load their module on first use (PEP 562): a ring node serves
the relay ops without importing the planner or the client-side strategies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sr3.exports import lazy_exports

if TYPE_CHECKING:
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
    from sr3.recovery.recover import Recoverer, RecoveryResult
    from sr3.recovery.relay import RelayOps
    from sr3.recovery.star import StarRecovery
    from sr3.recovery.transfer_plan import STRATEGIES, PlannedTransfer
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

#: Each export's module, imported when the name is first read.
_EXPORTS = {
    "RecoveryContext": "sr3.recovery.base",
    "RecoveryLifecycle": "sr3.recovery.base",
    "RecoveryPhase": "sr3.recovery.base",
    "RecoveryStrategy": "sr3.recovery.base",
    "Span": "sr3.recovery.base",
    "TransferJob": "sr3.recovery.base",
    "RelayFaults": "sr3.recovery.frames",
    "LineRecovery": "sr3.recovery.line",
    "Assembly": "sr3.recovery.pieces",
    "ChainIndex": "sr3.recovery.pieces",
    "Piece": "sr3.recovery.pieces",
    "merge_pieces": "sr3.recovery.pieces",
    "PlanDecision": "sr3.recovery.planner",
    "PlannerInputs": "sr3.recovery.planner",
    "ProbeResult": "sr3.recovery.planner",
    "Prober": "sr3.recovery.planner",
    "plan_mechanism": "sr3.recovery.planner",
    "Recoverer": "sr3.recovery.recover",
    "RecoveryResult": "sr3.recovery.recover",
    "RelayOps": "sr3.recovery.relay",
    "StarRecovery": "sr3.recovery.star",
    "PlannedTransfer": "sr3.recovery.transfer_plan",
    "STRATEGIES": "sr3.recovery.transfer_plan",
    "TreeRecovery": "sr3.recovery.tree",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
