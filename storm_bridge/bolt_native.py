"""``NativeControl``: a stateful bolt task's side of native-mode checkpoints.

Under ``sr3.checkpoint.mode=native`` (:mod:`storm_bridge.native`'s ZooKeeper
protocol) a task registers its owner, watches the control record and acts on it
on its ``sr3-native`` thread: SNAPSHOT writes its keyed state to the ring,
RESTORE restores the committed epoch. Meanwhile the data tuples of a
rolled-back generation (stragglers) are dropped and reported to the coordinator.
:class:`~storm_bridge.bolt_runtime.BoltRuntime` holds this side as its base
class, so the task's one handle keeps every attribute.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from storm_bridge.native import BoltAgent
from storm_bridge.native_scope import OwnerScopeFacts
from zk.epoch_control import replay_step

if TYPE_CHECKING:
    from backend.checkpointer import OwnerCheckpointer
    from storm_bridge.lineage import Dedupe
    from storm_bridge.wiring import RingAccess

__all__ = ["NativeControl"]

logger = logging.getLogger(__name__)

#: Shortest time between two reports of dropped stragglers (native mode).
_DROPPED_REPORT_S: Final = 0.1


class NativeControl:
    """The native-mode half of a :class:`~storm_bridge.bolt_runtime.BoltRuntime`.

    The runtime sets every attribute below; see its docstring for what each holds.
    """

    ring: RingAccess | None
    topology: str
    owner: str
    checkpointer: OwnerCheckpointer
    tag: int | None
    failed: BaseException | None
    agent: BoltAgent | None
    lock: threading.Lock
    dropped: int
    store: Any
    restored: tuple[str, dict[str, Any], float] | None
    dedupe: Dedupe | None
    order: str | None
    replays_step: str | None

    def _native_setup(self) -> None:
        from storm_bridge.native import OWNER  # noqa: PLC0415 - ring clients on demand
        from zk.epochs import ZkEpochStore  # noqa: PLC0415 - ring clients on demand

        ring = self.ring
        if ring is None:
            return
        store = ZkEpochStore(ring.session, self.topology)
        # a restart bumps even before the first control record: the dead
        # process's counts are lost, so the spouts must replay
        bumped = store.register(OWNER, self.owner)
        agent = BoltAgent(bumped=bumped, owner=self.owner)
        if bumped:
            agent.min_generation = store.bump_generation()
            logger.info("owner %s restarted: rollback requested", self.owner)
        self.store = store
        self.agent = agent
        executor = ThreadPoolExecutor(1, thread_name_prefix="sr3-native")

        def changed(control: Any) -> None:
            # watch callbacks run on kazoo's thread: hand the work over
            executor.submit(self._on_control, control)

        store.watch_control(changed)

    def _on_control(self, control: Any) -> None:
        """Act on a control record (native mode, on the ``sr3-native`` thread)."""
        agent = self.agent
        if agent is None:
            return
        with self.lock:
            dedupe = self.dedupe
            if dedupe is not None and control is not None:
                dedupe.observe(control.phase.value, control.epoch, control.generation)
            action = agent.action(control)
            if action is None:
                return
            try:
                if action == BoltAgent.SNAPSHOT:
                    report = self._native_snapshot(control)
                elif action == BoltAgent.REPORT:
                    report = self._scope_facts()
                elif action == BoltAgent.KEEP:
                    held = {}
                    if dedupe is not None:
                        dedupe.keep()
                        held = dedupe.report()
                        self._await_replays(control.generation)
                    report = {**self._straggler_report(), **held, "kept": True}
                    self.restored = (control.step(), report, 0.0)
                else:
                    report = self._native_restore()
                    if dedupe is not None:
                        dedupe.reset()
                    self.restored = (control.step(), report, 0.0)
                self.store.report(control.step(), self.owner, report)
            except Exception as exc:
                # the task dies at its next tuple (a heartbeat at the latest),
                # and its restart rolls the topology back
                logger.exception("owner %s: %s failed", self.owner, action)
                self.failed = exc
                return
            agent.done(control, action)

    def _await_replays(self, generation: int) -> None:
        """Say how many replays this kept task awaits (no epoch opens meanwhile)."""
        dedupe = self.dedupe
        if dedupe is None or dedupe.replays_due == 0:
            self.replays_step = None
            return
        self.replays_step = replay_step(generation)
        self.store.report(self.replays_step, self.owner, {"due": dedupe.replays_due})

    def replays_progress(self) -> None:
        """Tell the coordinator once the replays this task awaited all came."""
        dedupe = self.dedupe
        step = self.replays_step
        if step is None or dedupe is None or dedupe.replays_due > 0:
            return
        self.replays_step = None
        self.store.report(step, self.owner, {"due": 0})

    def _scope_facts(self) -> dict[str, Any]:
        """The ROLLBACK report: what restoring only some owners needs of this one."""
        agent = self.agent
        dedupe = self.dedupe
        held = {"traced": False, "over": False} if dedupe is None else dedupe.report()
        facts = OwnerScopeFacts(
            fresh=agent is not None and agent.fresh,
            traced=held["traced"] is True,
            over=held["over"] is True,
            order=self.order,
        )
        return facts.report(held)

    def _native_snapshot(self, control: Any) -> dict[str, Any]:
        if self.dedupe is not None:
            # every tree before this PAUSE ended: the window is complete
            self.dedupe.close(control.epoch, control.generation)
        captured = self.checkpointer.capture()
        written = self.checkpointer.write(captured, control.epoch, control.offsets)
        self.checkpointer.confirm()
        return {
            "epoch": control.epoch,
            "kind": captured.kind,
            "key_groups": len(captured.blobs),
            "bytes": 0 if written is None else written.bytes_written,
        }

    def _native_restore(self) -> dict[str, Any]:
        report = self.checkpointer.restore()
        if report is None:
            return {}
        logger.info("owner %s restored epoch %s", self.owner, report.epoch)
        return {**self._straggler_report(), **report.to_dict()}

    def _straggler_report(self) -> dict[str, Any]:
        agent = self.agent
        fenced = agent is not None and agent.fenced
        return {"dropped": self.dropped, "fenced": fenced}

    def report_dropped(self) -> None:
        """Tell the coordinator stragglers still arrive (at most every 0.1 s).

        It resumes the spouts only once no owner dropped one for a while (see
        :meth:`storm_bridge.native_coordinator.NativeCoordinator._quiet`).
        """
        restored = self.restored
        now = time.monotonic()
        if restored is None or now - restored[2] < _DROPPED_REPORT_S:
            return
        step, report, _at = restored
        report = {**report, **self._straggler_report()}
        self.restored = (step, report, now)
        self.store.report(step, self.owner, report)

    def straggler(self) -> str | None:
        """Whether the data tuple read last is a straggler of a rolled-back generation.

        Its generation was noted when it was read (:attr:`tag`).

        Returns:
            None (process it) or how it is one (:meth:`BoltAgent.straggler`).
        """
        agent = self.agent
        if agent is None:
            return None
        latest = functools.partial(self.store.control, fresh=True)
        return agent.straggler(self.tag, latest)
