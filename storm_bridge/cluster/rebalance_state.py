"""One live rebalance's lifecycle and measurements (see :mod:`.rebalance`).

A rebalance moves through :class:`Phase`::

    ARMED --barrier of epoch e sent to a task of the component--> HOLDING
    HOLDING --epoch e commits--> SWITCHING --every new task restored--> DONE
    HOLDING --rollback or epoch e abandoned--> ARMED
    ARMED --nothing to change--> DONE

A key-groups rebalance (:mod:`.keygroup_rebalance`) also moves
``ARMED --new tasks start--> SWITCHING --they restored--> ARMED``, goes back to
ARMED after each batch switched, and ends ``ARMED --> DONE``.
:meth:`Rebalance.move` refuses any other transition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from storm_bridge.errors import ClusterStateError

__all__ = ["Phase", "Rebalance"]


class Phase(enum.Enum):
    """Lifecycle of one rebalance (see the module docstring)."""

    ARMED = "armed"
    HOLDING = "holding"
    SWITCHING = "switching"
    DONE = "done"


_MOVES = {
    Phase.ARMED: {Phase.HOLDING, Phase.DONE},
    Phase.HOLDING: {Phase.SWITCHING, Phase.ARMED},
    Phase.SWITCHING: {Phase.DONE},
    Phase.DONE: set(),
}
#: What a key-groups rebalance may also do: start new tasks (SWITCHING) between
#: batches, and go back to ARMED once they run.
_KEY_GROUP_MOVES = {
    Phase.ARMED: {Phase.SWITCHING},
    Phase.SWITCHING: {Phase.ARMED},
}


@dataclass
class Rebalance:
    """One rebalance and its measurements (clock readings in seconds).

    Attributes:
        rebalance_id: The request's id.
        targets: ``{component: (tasks before, tasks after)}``.
        requested_at: When the run accepted it.
        phase: Where it is.
        epoch: The epoch whose commit switches the tasks.
        first_epoch: The lowest epoch that may hand over: every task of the
            component gets its barrier after the rebalance was (re-)armed.
        attempts: Hand-overs started (a rollback before the switch retries).
        switched_at: When the task lists changed.
        ended_at: When the held tuples went to the new tasks.
        bytes_moved: State bytes the new tasks read from the ring.
        pauses: Longest time a task's tuples were held, by task id.
        held: Tuples held, over every attempt.
        rollbacks: Global rollbacks while it was under way.
        unmoved_processed: Tuples the bolt tasks of other components processed
            during the last hand-over (they never pause).
        how: ``key-groups`` for a key-groups rebalance (None: tasks restart).
        batches: Key-group batches switched, a batch a rollback undid counted
            again (key-groups only).
        key_groups_moved: Key groups whose owner at the end differs from the
            one at the request (key-groups only).
        kept_processed: Tuples the rebalanced components' staying tasks
            processed from the first batch held to the end (key-groups only;
            their processes never restart).

    With ``how`` set, ``pauses`` are by key group, not by task.
    """

    rebalance_id: str
    targets: dict[str, tuple[int, int]]
    requested_at: float
    phase: Phase = Phase.ARMED
    epoch: int | None = None
    first_epoch: int = 0
    attempts: int = 0
    switched_at: float | None = None
    ended_at: float | None = None
    bytes_moved: int = 0
    pauses: dict[int, float] = field(default_factory=dict)
    held: int = 0
    unmoved_processed: int = 0
    rollbacks: int = 0
    how: str | None = None
    batches: int = 0
    key_groups_moved: int = 0
    kept_processed: int = 0

    def move(self, new: Phase) -> None:
        """Change phase.

        Raises:
            ClusterStateError: the transition is not in the lifecycle.
        """
        extra = _KEY_GROUP_MOVES.get(self.phase, set()) if self.how else set()
        if new not in _MOVES[self.phase] and new not in extra:
            msg = (
                f"rebalance {self.rebalance_id}: illegal move "
                f"{self.phase.value} -> {new.value}"
            )
            raise ClusterStateError(msg)
        self.phase = new

    def to_dict(self, started: float = 0.0) -> dict[str, Any]:
        """Return the run report's entry; times are seconds since ``started``."""

        def rel(at: float | None) -> float | None:
            return None if at is None else round(at - started, 3)

        out: dict[str, Any] = {
            "id": self.rebalance_id,
            "targets": {c: {"from": a, "to": b} for c, (a, b) in self.targets.items()},
            "phase": self.phase.value,
            "epoch": self.epoch,
            "attempts": self.attempts,
            "start_s": rel(self.requested_at),
            "switch_s": rel(self.switched_at),
            "end_s": rel(self.ended_at),
            "bytes_moved": self.bytes_moved,
            "longest_key_pause_s": round(max(self.pauses.values(), default=0.0), 4),
            "held_tuples": self.held,
            "unmoved_processed": self.unmoved_processed,
            "rollbacks": self.rollbacks,
        }
        if self.how is not None:
            out.update(
                how=self.how,
                batches=self.batches,
                key_groups_moved=self.key_groups_moved,
                kept_processed=self.kept_processed,
            )
        return out
