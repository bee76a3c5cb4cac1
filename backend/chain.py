"""When a snapshot is FULL and when a DELTA: one rule for every engine.

An owner's snapshots form chains: a FULL epoch (a base) followed by DELTA
epochs holding only the key groups changed since. Restoring reads a base and
its deltas, so a chain is kept short: it holds at most ``max_deltas`` deltas
(``sr3.checkpoint.max.chain.length``) after its base; the snapshot that would
exceed it is FULL instead (compaction). An owner with no base in this run (the
first snapshot, after a restore or a rescale) writes FULL too: a delta must
append to a chain the run knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from sr3.errors import ConfigError
from sr3.manifest import Manifest

__all__ = ["DELTA", "FULL", "ChainPolicy", "Kind", "OwnerChain"]

Kind = Literal["full", "delta"]
FULL: Final = "full"
DELTA: Final = "delta"
_KEY: Final = "sr3.checkpoint.max.chain.length"


@dataclass(frozen=True)
class ChainPolicy:
    """How long a chain of deltas may grow before a FULL snapshot.

    Attributes:
        max_deltas: Deltas a chain may hold after its base (at least 1).

    Raises:
        ConfigError: ``max_deltas`` is below 1.
    """

    max_deltas: int = 8

    def __post_init__(self) -> None:
        if self.max_deltas < 1:
            msg = f"{_KEY}={self.max_deltas}: use at least 1"
            raise ConfigError(msg)

    def kind_at(self, latest: Manifest | None, epoch: int) -> Kind:
        """Return what an owner writes at ``epoch`` after its ``latest`` manifest.

        For a writer that keeps no chain in memory (``sr3 snapshot put``): the
        chain is read from the manifest, epochs being consecutive.
        """
        return self.kind(None if latest is None else epoch - latest.base_epoch - 1)

    def kind(self, deltas: int | None) -> Kind:
        """Return what the next snapshot is, given the deltas after the base.

        Args:
            deltas: Deltas the owner's chain holds after its base; None when
                the owner has no base yet.
        """
        if deltas is None or deltas >= self.max_deltas:
            return FULL
        return DELTA


class OwnerChain:
    """One owner's chain: what its next snapshot is, updated as they are written.

    Args:
        policy: The chain length bound.
    """

    def __init__(self, policy: ChainPolicy) -> None:
        self.policy = policy
        self._deltas: int | None = None
        #: deltas the chain may reach before a FULL one while compaction is
        #: postponed (:meth:`postpone`); 0: not postponed
        self._postponed = 0

    @property
    def deltas(self) -> int | None:
        """Deltas after the base (None: no base yet)."""
        return self._deltas

    def next_kind(self) -> Kind:
        """Return what the owner's next snapshot must be."""
        if self._deltas is not None and self._deltas < self._postponed:
            return DELTA
        return self.policy.kind(self._deltas)

    def postpone(self) -> None:
        """Postpone compaction by ``max_deltas`` more deltas, to 4x the bound at most.

        A sender of a live key-group hand-over calls it: its receivers read its
        chain batch after batch and keep the shards they read; a new base would
        make them read the whole state again.
        """
        if self._deltas is None:
            return
        bound = self.policy.max_deltas
        self._postponed = min(self._deltas + bound, 4 * bound)

    def written(self, kind: str) -> None:
        """Record a snapshot taken of ``kind`` (call when it is captured)."""
        self._deltas = 0 if kind == FULL or self._deltas is None else self._deltas + 1
        if kind == FULL:
            self._postponed = 0

    def restart(self) -> None:
        """Forget the chain (the state was restored or rescaled): next is FULL."""
        self._deltas = None
        self._postponed = 0
