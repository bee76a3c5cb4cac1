"""The lazy restore's background transfer: planned, run, and what it did.

:func:`run_transfer` plans an owner's transfer (star, line or tree, the
planner's choice, :class:`~sr3.recovery.PlannedTransfer`) and runs it, handing
each key group over as it arrives whole. Neither a failed plan nor a failed
transfer is raised: both are logged and said in the :class:`TransferOutcome`,
and :class:`~backend.lazy.ChainLoader` then fetches what is missing shard by
shard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sr3.recovery.transfer_plan import PlannedTransfer

__all__ = ["TransferOutcome", "run_transfer"]

logger = logging.getLogger(__name__)

Blob = bytes | memoryview


@dataclass(frozen=True)
class TransferOutcome:
    """What a lazy restore's background transfer did.

    Attributes:
        bytes_received: Payload bytes it received (merged pieces as sent; 0:
            none was planned, or it failed).
        transfer: The structure it ran (empty: planning failed).
        reason: What it did and why (the planner's words).
    """

    bytes_received: int
    transfer: str
    reason: str


def run_transfer(
    plan: Callable[[], PlannedTransfer],
    deliver: Callable[[int, list[Blob]], None],
) -> TransferOutcome:
    """Plan the transfer and run it, giving ``deliver`` each key group brought whole."""
    try:
        transfer = plan()
    except Exception as exc:  # the shard-by-shard fetch is the fallback
        logger.warning(
            "lazy restore: planning the transfer failed (%s); fetching shards directly",
            exc,
        )
        reason = f"lazy restore: no transfer planned ({exc}); shard by shard"
        return TransferOutcome(bytes_received=0, transfer="", reason=reason)
    mechanism = transfer.decision.mechanism
    reason = (
        "lazy restore: key groups fetched when first needed, the rest by "
        f"{mechanism} in the background: {transfer.decision.reason}"
    )
    try:
        received = transfer.run(deliver).bytes_received
    except Exception as exc:  # the shard-by-shard fetch is the fallback
        logger.warning(
            "lazy restore: %s transfer failed (%s); fetching shards directly",
            mechanism,
            exc,
        )
        reason += f"; the transfer failed ({exc}), shard by shard"
        received = 0
    return TransferOutcome(bytes_received=received, transfer=mechanism, reason=reason)
