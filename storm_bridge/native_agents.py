"""Native-mode agents: what one replayable spout task and one stateful task decide.

Pure bookkeeping, no ZooKeeper: :class:`SpoutAgent` tracks the trees a spout
task emitted and asks for a rollback when one fails; :class:`BoltAgent` says
what a control record asks of a stateful task. The protocol they follow is in
:mod:`storm_bridge.native`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from zk.epoch_control import EpochControl, Phase

__all__ = ["MAX_REPLAYS", "RESUMED", "BoltAgent", "SpoutAgent", "as_int"]

logger = logging.getLogger(__name__)

#: Replays of a failed tree at one offset before it is dropped (a poison tuple).
MAX_REPLAYS: Final = 3
#: Phases that follow a rollback's RUNNING: a watch may coalesce RUNNING away.
RESUMED: Final = frozenset({Phase.RUNNING, Phase.PAUSE, Phase.SNAPSHOT})


@dataclass(frozen=True)
class _Tree:
    """A tree a replayable spout task emitted and Storm still tracks."""

    user_id: Any
    offset: Any
    #: Generation the spout followed when it emitted the tree (None: none yet).
    generation: int | None


class SpoutAgent:
    """Native-mode bookkeeping of one replayable spout task (its main thread).

    The control record arrives through a ZooKeeper watch (:meth:`on_control`,
    any thread); the spout reads it before each ``next_tuple``.

    A failed tree (a tuple that raised, timed out or died with its task) never
    replays on its own: replaying from the spout alone would feed the tuples
    after it twice to stateful tasks that had seen them, and a join that had
    already emitted would not emit again. The spout asks for a rollback instead
    (:meth:`take_rollback`): every owner restores the last committed epoch and
    every spout seeks to its offset. A tree failing at one offset more than
    :data:`MAX_REPLAYS` times (a poison tuple) is still rolled back, and its
    offset is then skipped (:meth:`skips`), so it has no effect at all.

    Args:
        name: The spout task (``component/index``).
        bumped: Whether this task bumped the generation when it started (it then
            waits for the rollback's RUNNING before emitting).
        fenced: Whether every tuple carries its tree's generation (real Storm's
            hidden field): a rollback then need not wait for the trees in
            flight (:meth:`may_report`).
    """

    def __init__(self, *, name: str, bumped: bool, fenced: bool = False) -> None:
        self.name = name
        self.control: EpochControl | None = None
        self.bumped = bumped
        self.fenced = fenced
        #: Control records of an older generation are ignored (set after a bump).
        self.min_generation = 0
        #: Generation whose RUNNING this task follows (None: none seen yet).
        self.generation: int | None = None
        self._pending: dict[int, _Tree] = {}
        self._seq = 0
        #: Generation a rollback is to be asked from (set by a failed tree).
        self._rollback: tuple[int | None] | None = None
        #: A rollback was asked for and this task has not rewound since.
        self._requested = False
        self._failures: dict[str, int] = {}
        self._poisoned: set[str] = set()
        self._reported: set[str] = set()

    def on_control(self, control: EpochControl | None) -> None:
        """Remember the latest control record (called by the watch)."""
        self.control = control

    @property
    def pending(self) -> int:
        """Trees emitted and neither acked nor failed yet."""
        return len(self._pending)

    def may_report(self, control: EpochControl) -> bool:
        """Whether this task may report ``control``'s step (it emits nothing then).

        A PAUSE waits until every tree this task emitted is acked or failed:
        the snapshot must cover them. A ROLLBACK waits too where a tuple may
        carry no generation, so a straggler could not be told from a replay.
        Where every tuple carries its generation, each owner drops the older
        ones whenever they come; waiting would only hold the topology still
        until the trees lost with a dead worker time out (up to twice
        ``topology.message.timeout.secs``, 30 s by default, on real Storm).
        """
        if control.phase is Phase.ROLLBACK and self.fenced:
            return True
        return not self._pending

    @property
    def emit_generation(self) -> int:
        """The generation an emit now belongs to (carried by its whole tree).

        A spout emits only once it follows a generation; 0 (the generation
        before any rollback) stands for none.
        """
        return 0 if self.generation is None else self.generation

    @property
    def requested(self) -> bool:
        """Whether this task asked for a rollback that has not ended yet."""
        return self._requested or self._rollback is not None

    def follow(self, generation: int) -> None:
        """Follow ``generation``'s RUNNING (trees emitted before it join it)."""
        if self.generation is None:
            self._pending = {
                seq: tree
                if tree.generation is not None
                else _Tree(tree.user_id, tree.offset, generation)
                for seq, tree in self._pending.items()
            }
        self.generation = generation

    def track(self, user_id: Any, offset: Any = None) -> int:
        """Return the message id of a new emit at ``offset``."""
        self._seq += 1
        self._pending[self._seq] = _Tree(user_id, offset, self.generation)
        return self._seq

    def skips(self, offset: Any) -> bool:
        """Whether an emit at ``offset`` is a dropped poison tuple."""
        return offset is not None and repr(offset) in self._poisoned

    def acked(self, seq: Any) -> Any:
        """Forget an acked tree; return the user's message id (or None)."""
        tree = self._pending.pop(as_int(seq), None)
        return None if tree is None else tree.user_id

    def failed(self, seq: Any) -> Any:
        """Note a failed tree and ask for a rollback; return the user's id.

        A tree of a generation already being rolled back asks for nothing: that
        rollback replays it. One that failed :data:`MAX_REPLAYS` times at the
        same offset (a poison tuple) is rolled back once more, then skipped.
        """
        tree = self._pending.pop(as_int(seq), None)
        if tree is None:
            return None
        if not self._current(tree):
            return tree.user_id
        if tree.offset is not None:
            mark = repr(tree.offset)
            self._failures[mark] = self._failures.get(mark, 0) + 1
            if self._failures[mark] > MAX_REPLAYS:
                logger.error(
                    "spout %s: tree at offset %r failed %s times; dropped (it is "
                    "skipped after the rollback)",
                    self.name,
                    tree.offset,
                    self._failures[mark],
                )
                self._poisoned.add(mark)
        self._rollback = (tree.generation,)
        return tree.user_id

    def _current(self, tree: _Tree) -> bool:
        """Whether ``tree`` failed in the generation running, no rollback asked."""
        if self.requested or tree.generation != self.generation:
            return False
        control = self.control
        return control is None or control.generation == self.generation

    def take_rollback(self) -> tuple[bool, int | None]:
        """Return (whether to ask for a rollback, generation it rolls back)."""
        rollback, self._rollback = self._rollback, None
        if rollback is None:
            return False, None
        self._requested = True
        return True, rollback[0]

    @staticmethod
    def rewinding(control: EpochControl) -> bool:
        """Whether ``control`` is a rollback under way (nothing to adopt yet)."""
        return control.phase not in RESUMED

    def rewinds(self, control: EpochControl) -> bool:
        """Whether ``control`` shows a rollback ended that this task has not followed.

        A watch may skip RUNNING: a later PAUSE or SNAPSHOT of a newer generation
        also means the spouts resumed after the rollback.
        """
        return control.phase in RESUMED and self.generation != control.generation

    def reset(self) -> None:
        """Forget pending trees and asked rollbacks (a rollback sought the spout)."""
        self._pending.clear()
        self._rollback = None
        self._requested = False

    def report_once(self, step: str) -> bool:
        """Return True the first time ``step`` is reported."""
        if step in self._reported:
            return False
        self._reported.add(step)
        return True


def as_int(seq: Any) -> int:
    """Return ``seq`` as an int (-1 when it is none: an id Storm did not give)."""
    try:
        return int(seq)
    except (TypeError, ValueError):
        return -1


class BoltAgent:
    """Native-mode decisions of one stateful task (pure; the caller holds a lock).

    Args:
        bumped: Whether this task bumped the generation when it started: it then
            snapshots nothing before restoring in a rollback.
        owner: The task's owner id (a RESTORE may name the owners to restore).
    """

    SNAPSHOT: Final = "snapshot"
    RESTORE: Final = "restore"
    #: A rollback's owners report what restoring only some of them needs.
    REPORT: Final = "report"
    #: A RESTORE that restores other owners: this one keeps its state.
    KEEP: Final = "keep"
    #: Verdicts of :meth:`straggler`.
    STALE: Final = "stale"
    UNTAGGED: Final = "untagged"

    def __init__(self, *, bumped: bool, owner: str = "") -> None:
        #: Control records of an older generation are ignored (set after a bump).
        self.min_generation = 0
        self.owner = owner
        #: Restarted and not restored since: its state is gone.
        self.fresh = bumped
        self._synced: int | None = None
        self._adopt = not bumped
        self._done: set[str] = set()
        #: Generation restored and not yet RUNNING: data tuples are stragglers.
        self.awaiting: int | None = None
        #: Generation of the last restore: tuples of older trees are stale.
        self.fence: int | None = None
        #: Whether data tuples arrived with and without a generation.
        self._tagged = False
        self._untagged = False

    def action(self, control: EpochControl | None) -> str | None:
        """Return what ``control`` asks of this task now (None: nothing)."""
        if control is None or control.generation < self.min_generation:
            return None
        generation = control.generation
        if self._adopt:
            # a first start joins generation g: a tree of an older one still in
            # flight was rolled back before this task took part, and is replayed
            self._adopt = False
            self._synced = generation
            self.fence = generation
        if self.awaiting == generation and control.phase in RESUMED:
            self.awaiting = None
        if control.step() in self._done:
            return None
        if control.phase is Phase.SNAPSHOT and self._synced == generation:
            return self.SNAPSHOT
        if control.phase is Phase.ROLLBACK:
            return self.REPORT
        if control.phase is Phase.RESTORE:
            if self.fresh or control.restores(self.owner):
                return self.RESTORE
            return self.KEEP
        return None

    def done(self, control: EpochControl, action: str) -> None:
        """Record that ``action`` of ``control`` completed."""
        self._done.add(control.step())
        if action == self.KEEP:
            # Its state stands: it snapshots in this generation. A tuple of an
            # older one still in flight is dropped like a restored task drops
            # it: spouts replay every tree after the commit, so its replay
            # comes in this generation (processed, or dropped by lineage if
            # it was). Processed late instead, after a commit dropped its
            # lineage, it would count twice: spouts do not wait for those
            # trees (SpoutAgent.may_report).
            self._synced = control.generation
            self.fence = control.generation
        if action == self.RESTORE:
            self.fresh = False
            self._synced = control.generation
            self.awaiting = control.generation
            self.fence = control.generation

    def stale(self, generation: int | None) -> bool | None:
        """Whether a data tuple whose tree has ``generation`` predates the restore.

        Every tree a replayable spout emits carries the generation the spout
        followed, and every tuple anchored on it carries it too. A tuple of an
        older generation than the one this task last restored (or kept its
        state through) is a straggler of a rolled-back tree, however late it
        comes: it must not touch the state. None: the tuple carries no
        generation (an unanchored emit, a tree through a Java bolt, a Storm
        submit without the hidden field of
        :mod:`storm_bridge.generation_field`); the caller falls back
        to :meth:`resumed` and the rollback's quiet time.
        """
        if generation is None:
            self._untagged = True
            return None
        self._tagged = True
        return self.fence is not None and generation < self.fence

    def straggler(
        self, generation: int | None, latest: Callable[[], EpochControl | None]
    ) -> str | None:
        """Whether a data tuple is a straggler of a rolled-back generation.

        Args:
            generation: The generation its tree carries (None: none).
            latest: Reads the control record fresh (only for a tuple without
                a generation, between a restore and the spouts' resumption).

        Returns:
            :data:`STALE` (its generation predates the last restore),
            :data:`UNTAGGED` (it carries none and came after a restore, before
            the spouts resumed), or None: process it.
        """
        stale = self.stale(generation)
        if stale is not None:
            return self.STALE if stale else None
        if self.awaiting is None:
            return None
        # spouts are still paused until RUNNING: check the latest record
        return None if self.resumed(latest()) else self.UNTAGGED

    @property
    def fenced(self) -> bool:
        """Whether every data tuple so far carried its generation (and one did).

        The coordinator then resumes a rollback's spouts without waiting for a
        quiet time: stragglers are told apart by their generation alone.
        """
        return self._tagged and not self._untagged

    def resumed(self, control: EpochControl | None) -> bool:
        """Whether a straggler check read shows the rollback's RUNNING."""
        if self.awaiting is None:
            return True
        if (
            control is not None
            and control.phase in RESUMED
            and control.generation == self.awaiting
        ):
            self.awaiting = None
            return True
        return False
