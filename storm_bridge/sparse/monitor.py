"""Following the native protocol of a topology on Storm: phases, commits, restores.

A thread polls the control record (:class:`zk.epochs.ZkEpochStore`) and the
committed record every 0.1 s and keeps what it saw with the time it saw it:
that dates every rollback (the generation moved), restore and commit of a run
on a cluster whose tasks :func:`~storm_bridge.sparse.run.run_on_storm` cannot
watch directly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from backend.owners import task_label
from sr3.errors import SR3Error
from storm_bridge.wiring import RingAccess
from zk.epochs import EpochControl, Phase, ZkEpochStore

__all__ = ["ControlMonitor"]

logger = logging.getLogger(__name__)

_POLL_S: Final = 0.1


#: Phases a generation reaches only once every owner restored.
_AFTER_RESTORE: Final = frozenset({Phase.RUNNING, Phase.PAUSE, Phase.SNAPSHOT})


@dataclass(frozen=True)
class _Seen:
    at: float
    phase: Phase
    epoch: int
    generation: int


@dataclass(frozen=True)
class _Commit:
    at: float
    epoch: int
    offsets: dict[str, Any]
    generation: Any


class ControlMonitor:
    """Polls a topology's control and commit records on a daemon thread."""

    def __init__(
        self,
        store: ZkEpochStore,
        ring: RingAccess,
        topology: str,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.ring = ring
        self.topology = topology
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: list[_Seen] = []
        self._commits: list[_Commit] = []
        self._restores: dict[int, dict[str, Any]] = {}
        self._restores_done: set[int] = set()
        #: Each rollback's scope, restored owners and reason, by generation.
        self._scopes: dict[str, Any] = {}
        record = ring.committed(topology)
        self._base_epoch = -1 if record is None else record.epoch
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="sr3-storm-monitor", daemon=True
        )

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(_POLL_S):
            try:
                self._poll()
            except SR3Error as exc:  # a ZooKeeper hiccup: poll again
                logger.warning("monitor of %s: %s", self.topology, exc)

    def _poll(self) -> None:
        now = self._clock()
        control = self.store.control()
        record = self.ring.committed(self.topology)
        with self._lock:
            if control is not None:
                self._scopes.update(dict(control.stats.get("scopes") or {}))
                seen = _Seen(now, control.phase, control.epoch, control.generation)
                last = self._seen[-1] if self._seen else None
                if last is None or (last.phase, last.epoch, last.generation) != (
                    seen.phase,
                    seen.epoch,
                    seen.generation,
                ):
                    self._seen.append(seen)
            if record is not None and record.epoch > self._base_epoch:
                top = self._commits[-1].epoch if self._commits else self._base_epoch
                if record.epoch > top:
                    generation = record.extra.get("generation")
                    self._commits.append(
                        _Commit(now, record.epoch, dict(record.offsets), generation)
                    )
        if control is not None and control.generation > 0:
            self._read_restores(control)

    def _read_restores(self, control: EpochControl) -> None:
        """Keep the owners' restore reports of ``control``'s generation.

        The coordinator keeps a generation's restore step until the next
        rollback, so reports are read even when the RESTORE phase passed
        between two polls; owners report one by one, so they are re-read while
        the phase lasts and once after it.
        """
        gen = control.generation
        with self._lock:
            if gen in self._restores_done:
                return
        prefix = f"{Phase.RESTORE.value}-{gen}-"
        reports: dict[str, Any] = {}
        for step in self.store.steps():
            if step.startswith(prefix):
                reports.update(self.store.reports(step))
        with self._lock:
            self._restores.setdefault(gen, {}).update(reports)
            if control.phase in _AFTER_RESTORE:
                self._restores_done.add(gen)

    def first_seen_at(self) -> float | None:
        """When the protocol's first control record was seen."""
        with self._lock:
            return self._seen[0].at if self._seen else None

    def first_commit_at(self) -> float | None:
        """When the run's first epoch was seen committed."""
        with self._lock:
            return self._commits[0].at if self._commits else None

    def _generation_at(self, at: float) -> int:
        before = [s for s in self._seen if s.at <= at]
        return before[-1].generation if before else 0

    def rollback_after(self, at: float) -> float | None:
        """When the first rollback that began after ``at`` resumed (RUNNING)."""
        with self._lock:
            gen = self._generation_at(at)
            for seen in self._seen:
                if seen.at >= at and seen.generation > gen:
                    if seen.phase is Phase.RUNNING:
                        return seen.at
        return None

    def final_commit(self, spouts: int, *, after: float | None) -> float | None:
        """When the final state was first committed, once a later commit proves it.

        Two consecutive commits of one generation, both after ``after`` and of
        the generation now running, with equal offsets of all ``spouts`` spout
        tasks (at least one emitted): returns the first one's time.
        """
        with self._lock:
            current = self._seen[-1] if self._seen else None
            commits = [c for c in self._commits if after is None or c.at >= after]
        if current is None or current.phase is not Phase.RUNNING:
            return None
        for first, second in zip(commits, commits[1:], strict=False):
            same = first.generation == second.generation == current.generation
            offsets = second.offsets
            full = len(offsets) >= spouts and any(
                v is not None for v in offsets.values()
            )
            if same and full and first.offsets == offsets:
                return first.at
        return None

    def _merged(self, gens: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The restore reports and the scope of the rollbacks of ``gens`` (locked).

        Scope ``global`` if any of them was, with its reason; else the last's.
        """
        restores: dict[str, Any] = {}
        scope: dict[str, Any] = {}
        for gen in gens:
            _merge_restores(restores, self._restores.get(gen, {}))
            entry = dict(self._scopes.get(str(gen)) or {})
            if entry and scope.get("scope") != "global":
                scope = entry
        return restores, scope

    def recovery(self, cause: str, at: float, started: float) -> dict[str, Any]:
        """The report entry of the rollback a kill at ``at`` caused."""
        with self._lock:
            gen = self._generation_at(at)
            later = [s for s in self._seen if s.at >= at and s.generation > gen]
            new_gen = later[0].generation if later else None
            detected = later[0].at if later else None
            restore = next((s.at for s in later if s.phase is Phase.RESTORE), None)
            running = next((s.at for s in later if s.phase is Phase.RUNNING), None)
            commit = next(
                (
                    c.at
                    for c in self._commits
                    if running is not None and c.at >= running
                ),
                None,
            )
            # a second bump (a worker's tasks re-registering) restarts the
            # rollback: the generation that resumed is the one that restored
            restored_gen = next(
                (s.generation for s in later if s.phase is Phase.RUNNING), new_gen
            )
            # every rollback until the first commit after it belongs to this
            # recovery: on Storm the killed tasks come back only after
            # rollbacks that restored no one (their trees timed out first).
            # A commit seen after the kill may be an epoch that ended before
            # it (the monitor polls): the first commit of a newer generation
            first_commit = next(
                (
                    c.at
                    for c in self._commits
                    if detected is not None
                    and c.at >= detected
                    and (c.generation is None or c.generation > gen)
                ),
                None,
            )
            gens = sorted(
                {
                    s.generation
                    for s in later
                    if first_commit is None or s.at <= first_commit
                }
            )
            restores, scope = self._merged(gens)
        timeline = {
            "detect_s": _span(at, detected),
            "restore_s": _span(detected, running),
            "replay_s": _span(running, commit),
        }
        restored = {
            owner: r for owner, r in restores.items() if dict(r).get("kept") is not True
        }
        mechanisms = sorted({str(dict(r).get("mechanism")) for r in restored.values()})
        used = sorted({str(dict(r).get("used")) for r in restored.values()})
        return {
            "cause": cause,
            "at_s": round(at - started, 3),
            "generation": restored_gen,
            "mechanism": ",".join(mechanisms) or "none",
            "used": ",".join(used) or "none",
            "timeline": timeline,
            "phases": [
                {"phase": "detect", "seconds": timeline["detect_s"], "part": "storm"},
                {"phase": "restore", "seconds": timeline["restore_s"], "part": "sr3"},
                {"phase": "replay", "seconds": timeline["replay_s"], "part": "sr3"},
            ],
            "restore_started_s": _span(at, restore),
            "restored_bytes": sum(
                int(dict(r).get("bytes", 0)) for r in restored.values()
            ),
            "restores": restores,
            # sr3.recovery.scope: which owners restored (the others kept their
            # state and dropped the replay's duplicates), and why
            "scope": scope.get("scope"),
            "generations": gens,
            "restored_tasks": sorted(task_label(owner) for owner in restored),
            "reason": scope.get("reason"),
        }


def _merge_restores(merged: dict[str, Any], reports: dict[str, Any]) -> dict[str, Any]:
    """Add one generation's restore reports; an owner that restored wins."""
    for owner, report in reports.items():
        if dict(report).get("kept") is not True or owner not in merged:
            merged[owner] = report
    return merged


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return round(end - start, 4)
