"""The native checkpoint protocol's coordinator: its state machine and its thread.

:class:`NativeCoordinator` moves the control record through the phases of
:mod:`storm_bridge.native` (open an epoch, snapshot, commit; roll back, restore,
resume) as the tasks' reports allow; :class:`CoordinatorThread` runs it on a
daemon thread of spout task 0 while that task holds the coordinator znode.
:class:`EpochStore` and :class:`CommitLog` are the records it reads and writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from storm_bridge.native import NATIVE, OWNER, SPOUT
from storm_bridge.native_agents import as_int
from storm_bridge.native_scope import (
    GLOBAL,
    TASK,
    decide_native_scope,
    replays_overdue,
)
from zk.epoch_control import EpochControl, Phase, replay_step

if TYPE_CHECKING:  # kazoo loads only in a task that talks to ZooKeeper
    from zk.checkpoints import CommitRecord

__all__ = ["CommitLog", "CoordinatorThread", "EpochStore", "NativeCoordinator"]

logger = logging.getLogger(__name__)


class EpochStore(Protocol):
    """The records the protocol shares (ZooKeeper: :class:`zk.epochs.ZkEpochStore`)."""

    def control(self, *, fresh: bool = False) -> EpochControl | None:
        """Return the control record."""

    def set_control(self, control: EpochControl) -> None:
        """Write the control record."""

    def generation(self) -> int:
        """Return the rollback counter."""

    def bump_generation(self) -> int:
        """Increment the rollback counter."""

    def request_rollback(self, seen: int | None) -> int:
        """Bump the counter unless it moved past ``seen``; return its value."""

    def registered(self, kind: str) -> set[str]:
        """Return the registered tasks of a kind."""

    def reports(self, step: str) -> dict[str, Any]:
        """Return the reports of a step by task."""

    def steps(self) -> list[str]:
        """Return the names of the steps whose reports are kept."""

    def drop_steps(self, keep: Collection[str]) -> None:
        """Delete the reports of every step not in ``keep``."""


class CommitLog(Protocol):
    """Where one topology's commits go (:class:`backend.committer.EpochCommitter`).

    A commit also collects what it supersedes.
    """

    def committed(self) -> CommitRecord | None:
        """Return the last committed epoch."""

    def commit(self, record: CommitRecord) -> None:
        """Record a committed epoch."""


@dataclass
class _Stats:
    commits: int = 0
    rollbacks: int = 0
    pause_total_s: float = 0.0
    pause_max_s: float = 0.0
    last_pause_s: float = 0.0
    #: Each rollback's scope, restored owners and reason, by generation.
    scopes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scopes": dict(self.scopes),
            "commits": self.commits,
            "rollbacks": self.rollbacks,
            "pause_total_s": round(self.pause_total_s, 6),
            "pause_max_s": round(self.pause_max_s, 6),
            "last_pause_s": round(self.last_pause_s, 6),
        }


class NativeCoordinator:
    """The protocol's state machine; :meth:`step` moves it on when it can.

    Args:
        store: The shared records.
        log: Where commits go.
        topology: The topology name.
        interval_s: Time in RUNNING before the next epoch opens.
        timeout_s: A PAUSE or SNAPSHOT open this long ends in a rollback.
        clock: Monotonic clock in seconds.
        quiet_s: After every owner restored, how long no owner may have dropped
            a straggler (a data tuple of the rolled-back generation, still in
            flight) before spouts resume (``sr3.checkpoint.rollback.quiet.s``);
            only where tuples carry no generation (see :meth:`_quiet`).
        scope: ``sr3.recovery.scope``: under ``task`` a rollback restores only
            the owners that lost their state
            (:func:`~storm_bridge.native_scope.decide_native_scope`).
    """

    def __init__(
        self,
        *,
        store: EpochStore,
        log: CommitLog,
        topology: str,
        interval_s: float,
        timeout_s: float,
        clock: Callable[[], float],
        quiet_s: float = 1.0,
        scope: str = GLOBAL,
    ) -> None:
        self._quiet_s = quiet_s
        self._scope = scope
        #: Why the next rollback restores every owner (replays overdue).
        self._forced: str | None = None
        #: Stragglers the owners reported dropped, and when that last changed.
        self._dropped: tuple[int, float] = (0, clock())
        self._store = store
        self._log = log
        self._topology = topology
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._since = clock()
        self._pause_started = self._since
        self._stats: _Stats | None = None
        self._restore_step = ""

    def _enter(self, control: EpochControl) -> EpochControl:
        stats = self._stats or _Stats()
        control = EpochControl(
            control.phase,
            control.epoch,
            control.generation,
            control.offsets,
            stats.to_dict(),
            control.restore,
        )
        self._store.set_control(control)
        if control.phase is Phase.RESTORE:
            self._restore_step = control.step()
        # the generation's restore reports stay until the next restore, so a
        # run report can name each owner's mechanism after the phase has passed
        self._store.drop_steps(
            keep={control.step(), self._restore_step, replay_step(control.generation)}
        )
        self._since = self._clock()
        if control.phase is Phase.PAUSE:
            self._pause_started = self._since
        logger.info(
            "native checkpoints of %s: %s epoch %s generation %s",
            self._topology,
            control.phase.value,
            control.epoch,
            control.generation,
        )
        return control

    def step(self) -> EpochControl:
        """Read the records and take at most one transition; return the control.

        Raises:
            CoordinationError: ZooKeeper failed, or another coordinator committed.
        """
        control = self._store.control()
        generation = self._store.generation()
        if control is None:
            record = self._log.committed()
            epoch = 0 if record is None else record.epoch
            # a rollback asked for before the first record (a tree failed, a
            # task restarted): spouts may have emitted, owners counted; roll
            # back rather than adopt a world that never restored
            phase = Phase.ROLLBACK if generation > 0 else Phase.RUNNING
            return self._enter(EpochControl(phase, epoch, generation))
        if self._stats is None:
            known = _Stats().to_dict()
            self._stats = _Stats(
                **{k: v for k, v in dict(control.stats).items() if k in known}
            )
        now = self._clock()
        phase = control.phase
        if generation != control.generation:
            return self._enter(EpochControl(Phase.ROLLBACK, control.epoch, generation))
        if phase is Phase.RUNNING:
            if now - self._since >= self._interval_s:
                if self._scope == TASK and self._replays_waiting(generation, now):
                    return control
                opened = EpochControl(Phase.PAUSE, control.epoch + 1, generation)
                return self._enter(opened)
            return control
        if phase in (Phase.PAUSE, Phase.SNAPSHOT) and (
            now - self._since >= self._timeout_s
        ):
            logger.error(
                "epoch %s of %s still %s after %s s; rolling back",
                control.epoch,
                self._topology,
                phase.value,
                self._timeout_s,
            )
            self._store.bump_generation()
            return control
        kind = SPOUT if phase in (Phase.PAUSE, Phase.ROLLBACK) else OWNER
        expected = self._store.registered(kind)
        owners: set[str] = set()
        if phase is Phase.ROLLBACK and self._scope == TASK:
            # under task scope the owners say what restoring only some needs
            owners = self._store.registered(OWNER)
        reports = self._store.reports(control.step())
        if not expected | owners <= set(reports):
            return control
        if phase is Phase.PAUSE:
            offsets = {t: dict(reports[t]).get("offset") for t in sorted(expected)}
            return self._enter(
                EpochControl(Phase.SNAPSHOT, control.epoch, generation, offsets)
            )
        if phase is Phase.SNAPSHOT:
            return self._commit(control, sorted(expected))
        if phase is Phase.ROLLBACK:
            scope = decide_native_scope(
                self._scope, reports, sorted(owners), forced=self._forced
            )
            self._forced = None
            stats = self._stats
            stats.scopes[str(generation)] = scope.to_dict()
            logger.info(
                "rollback of %s to generation %s: scope %s (%s)",
                self._topology,
                generation,
                scope.scope,
                scope.reason,
            )
            return self._enter(
                EpochControl(
                    Phase.RESTORE, control.epoch, generation, restore=scope.restore
                )
            )
        if not self._quiet(reports, now):
            return control
        stats = self._stats
        stats.rollbacks += 1
        return self._enter(EpochControl(Phase.RUNNING, control.epoch, generation))

    def _replays_waiting(self, generation: int, now: float) -> bool:
        """Whether an owner that kept its state awaits replays (no epoch opens).

        Past ``timeout_s`` the generation is bumped and the rollback is global.
        """
        reports = self._store.reports(replay_step(generation))
        due = {o: as_int(dict(r).get("due", 0)) for o, r in reports.items()}
        due = {o: n for o, n in due.items() if n > 0}
        if not due:
            return False
        waited = now - self._since
        if waited >= self._timeout_s:
            self._forced = replays_overdue(due, waited)
            logger.error("%s: %s", self._topology, self._forced)
            self._store.bump_generation()
        return True

    def _quiet(self, reports: Mapping[str, Any], now: float) -> bool:
        """Whether spouts may resume after the owners restored (RESTORE).

        Tuples of failed or timed-out trees may still sit in queues or in a
        stalled task when the rollback's spouts drained. Where every tuple
        carries its tree's generation (the owners report ``fenced``), an owner
        drops the older ones whenever they come, so spouts resume at once.
        Where tuples carry none (Storm's own ShellBolt drops the key), the
        owners drop every data tuple until spouts resume, and resuming only
        once they went ``quiet_s`` without one keeps later ones out of the
        restored state, as long as no task stalls longer than that.
        """
        if reports and all(dict(r).get("fenced") is True for r in reports.values()):
            return True
        dropped = sum(as_int(dict(r).get("dropped", 0)) for r in reports.values())
        if dropped != self._dropped[0]:
            self._dropped = (dropped, now)
        quiet_since = max(self._since, self._dropped[1])
        return now - quiet_since >= self._quiet_s

    def _commit(self, control: EpochControl, owners: list[str]) -> EpochControl:
        # the record's module loads kazoo: only the coordinator's task needs it
        from zk.checkpoints import CommitRecord  # noqa: PLC0415 - ZooKeeper on demand

        stats = self._stats or _Stats()
        pause_s = self._clock() - self._pause_started
        record = CommitRecord(
            epoch=control.epoch,
            offsets=dict(control.offsets),
            owners=tuple(owners),
            extra={
                "mode": NATIVE,
                "generation": control.generation,
                "pause_s": round(pause_s, 6),
            },
        )
        last = self._log.committed()
        if last is None or last.epoch < control.epoch:
            # a retried step may find its commit done before the control moved on
            self._log.commit(record)
        stats.commits += 1
        stats.pause_total_s += pause_s
        stats.pause_max_s = max(stats.pause_max_s, pause_s)
        stats.last_pause_s = pause_s
        self._stats = stats
        running = self._enter(
            EpochControl(Phase.RUNNING, control.epoch, control.generation)
        )
        return running


class CoordinatorThread:
    """Runs a :class:`NativeCoordinator` on a daemon thread of the spout task 0.

    The task is a candidate when its component is the first registered
    replayable spout component by name; it coordinates while it holds the
    ephemeral coordinator znode.

    Args:
        store: The ZooKeeper records (with ``claim_coordinator``).
        coordinator: The state machine.
        name: This spout task (``component/0``).
        poll_s: Time between two steps.
    """

    def __init__(
        self, *, store: Any, coordinator: NativeCoordinator, name: str, poll_s: float
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._name = name
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="sr3-native-coordinator", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (at its next step)."""
        self._stop.set()

    def _candidate(self) -> bool:
        component = self._name.rsplit("/", 1)[0]
        spouts = self._store.registered(SPOUT)
        first = min((s.rsplit("/", 1)[0] for s in spouts), default=component)
        return component <= first

    def _loop(self) -> None:
        leading = False
        while not self._stop.wait(self._poll_s):
            try:
                if not self._candidate():
                    if leading:
                        self._store.release_coordinator()
                        leading = False
                    continue
                leading = leading or self._store.claim_coordinator(self._name)
                if leading:
                    self._coordinator.step()
            except Exception:  # a failed step is retried at the next poll
                logger.exception("native coordinator %s: step failed", self._name)
