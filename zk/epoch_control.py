"""The control record of native-mode checkpoints: the phase every task is asked for.

The coordinator writes an :class:`EpochControl` to
``/topologies/<name>/native/control`` (through :class:`zk.epochs.ZkEpochStore`);
every task reads it and reports under :func:`step_name` of its phase. The
protocol itself lives in :mod:`storm_bridge.native`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sr3.errors import CodecError

__all__ = ["EpochControl", "Phase", "replay_step", "step_name"]


class Phase(enum.Enum):
    """Phase of the native protocol (see :mod:`storm_bridge.native`)."""

    RUNNING = "running"
    PAUSE = "pause"
    SNAPSHOT = "snapshot"
    ROLLBACK = "rollback"
    RESTORE = "restore"


@dataclass(frozen=True)
class EpochControl:
    """What the coordinator asks of every task.

    Attributes:
        phase: The current phase.
        epoch: The epoch being checkpointed (PAUSE, SNAPSHOT) or the last one
            opened (other phases); epochs are never reused.
        generation: Rollback counter the phase belongs to.
        offsets: Spout offsets of the epoch (SNAPSHOT).
        stats: Coordinator statistics (commits, pause durations, rollbacks).
        restore: The owners a RESTORE asks to restore (None: every owner; the
            others keep their state: ``sr3.recovery.scope=task``).
    """

    phase: Phase
    epoch: int
    generation: int
    offsets: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)
    restore: tuple[str, ...] | None = None

    def restores(self, owner: str) -> bool:
        """Whether this RESTORE asks ``owner`` to restore the commit."""
        return self.restore is None or owner in self.restore

    def step(self) -> str:
        """Return the name of the reports this phase waits for."""
        return step_name(self.phase, self.generation, self.epoch)

    def to_dict(self) -> dict[str, Any]:
        """Return a msgpack-friendly dict."""
        return {
            "phase": self.phase.value,
            "epoch": self.epoch,
            "generation": self.generation,
            "offsets": dict(self.offsets),
            "stats": dict(self.stats),
            "restore": None if self.restore is None else list(self.restore),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EpochControl:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or invalid.
        """
        try:
            return cls(
                phase=Phase(raw["phase"]),
                epoch=int(raw["epoch"]),
                generation=int(raw["generation"]),
                offsets=dict(raw.get("offsets") or {}),
                stats=dict(raw.get("stats") or {}),
                restore=_owners(raw.get("restore")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed native epoch control {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc


def _owners(raw: Any) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list | tuple):
        msg = f"restore must be a list of owners, got {raw!r}"
        raise TypeError(msg)
    return tuple(str(o) for o in raw)


def step_name(phase: Phase, generation: int, epoch: int) -> str:
    """Return the report directory name of a phase: ``<phase>-<gen>-<epoch>``."""
    return f"{phase.value}-{generation}-{epoch}"


def replay_step(generation: int) -> str:
    """Return the report directory of the replays owners await after a rollback.

    Under task scope an owner that kept its state reports there how many
    tuples it processed before the rollback still await their replay; no
    epoch opens until none does (:mod:`storm_bridge.native_scope`).
    """
    return f"replays-{generation}"
