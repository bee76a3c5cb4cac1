"""Live rebalance of stateful components on the local cluster (``sr3 rebalance``).

A rebalance changes a stateful component's task count while the topology
runs, exactly once. Its hand-over is one epoch long (see ``docs/rebalance.md``)::

    ARMED --barrier of epoch e sent to a task of the component--> HOLDING
    HOLDING --epoch e commits--> SWITCHING --every new task restored--> DONE
    ARMED/HOLDING --rollback--> ARMED (held tuples dropped, tried again)
    HOLDING --epoch e abandoned--> ARMED (held tuples go to the old tasks)

* HOLDING: once a task of the component got the barrier of epoch ``e``, the
  tuples sent to it are held (per task), so its state stays the state it
  snapshots for ``e``. Every other task keeps processing.
* SWITCHING: when ``e`` commits, no epoch opens; the component's task list
  changes (:class:`~.task_lists.TaskLists`): retired tasks
  stop, kept tasks restart, new tasks start, and each restores from ``e``
  the keys its fields grouping routes to it over the new count
  (:meth:`backend.restorer.StateRestorer.restore_task`). The commit record's owners
  are the ownership version of each epoch: a rollback restores the ownership
  that matches the state it restores.
* DONE: the held tuples go, rerouted over the new tasks, and epochs resume.

Under ``sr3.rebalance.routing = key-groups`` no task restarts: key groups move
between live tasks a batch an epoch (:mod:`.keygroup_rebalance`); this class
hands its hooks to a :class:`~.keygroup_rebalance.KeyGroupHandOver`.

Any failure during a rebalance rolls the whole topology back
(:meth:`Rebalancer.in_progress` is the predicate a local recovery must veto
on). Phases move only through :meth:`Rebalance.move`
(:mod:`storm_bridge.cluster.rebalance_state`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from backend.owners import owner_name
from sr3.config import Sr3Config, read_setting
from sr3.keygroups import key_group_ranges
from storm_bridge.cluster.context import RoutingError
from storm_bridge.cluster.engine import Engine
from storm_bridge.cluster.keygroup_rebalance import KeyGroupHandOver
from storm_bridge.cluster.keygroup_routing import TABLE_CONF_KEY, table_conf
from storm_bridge.cluster.rebalance_state import Phase, Rebalance
from storm_bridge.cluster.rollbacks import is_stateful_bolt
from storm_bridge.cluster.task_lists import TaskLists
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.errors import ClusterStateError
from storm_bridge.messages import SYSTEM_COMPONENT
from topology_api.contract import fixed_parallelism
from topology_api.rebalance_plan import (
    ComponentInfo,
    RebalanceRequestError,
    TaskMoves,
    check_request,
)

__all__ = ["Phase", "Rebalance", "Rebalancer"]

logger = logging.getLogger(__name__)


class Rebalancer:
    """Carries out rebalances on one engine (the engine thread only).

    Args:
        engine: The engine; it must checkpoint (a coordinator).
        clock: Monotonic clock in seconds (the engine's).

    Raises:
        ClusterStateError: the engine has no checkpoint coordinator.
    """

    def __init__(self, engine: Engine, clock: Callable[[], float]) -> None:
        coordinator = engine.coordinator
        if coordinator is None:
            msg = (
                "live rebalancing needs checkpoints (sr3 run without --no-checkpoints)"
            )
            raise ClusterStateError(msg)
        self._engine = engine
        self._coordinator = coordinator
        self._clock = clock
        self._task_lists = TaskLists(engine, coordinator)
        #: Every rebalance of this run, oldest first.
        self.history: list[Rebalance] = []
        self._holding: dict[int, float] = {}
        self._held: list[tuple[str, tuple[Any, ...]]] = []
        self._restoring: set[int] = set()
        self._moves: dict[str, TaskMoves] = {}
        self._unmoved_base: dict[int, int] = {}
        #: the key-groups hand-over under way (None: none, or a task restart)
        self._kg: KeyGroupHandOver | None = None
        #: Called after each phase change (the run republishes its status).
        self.on_change: Callable[[], None] | None = None
        self._install()

    def _install(self) -> None:
        c, flow = self._coordinator, self._engine.flow
        commit, rollback, holds = c.on_commit, c.on_rollback, c.holds_epochs

        def on_commit(epoch: int) -> None:
            if commit is not None:
                commit(epoch)
            self._committed(epoch)

        def on_rollback() -> None:
            if rollback is not None:
                rollback()
            self._rolled_back()

        def holds_epochs() -> bool:
            return self._phase() is Phase.SWITCHING or (holds is not None and holds())

        c.on_commit, c.on_rollback, c.holds_epochs = (
            on_commit,
            on_rollback,
            holds_epochs,
        )
        c.barrier_sent_hook(self._barrier_sent)  # after the hooks installed before
        c.on_restored = self._restored
        c.on_dropped = self._dropped
        c.on_key_groups = self._key_groups_done
        c.on_captured = self._captured
        c.on_written = self._written
        tables = c.key_group_tables
        if tables is not None:

            def recorded() -> dict[str, Any]:
                kg = self._handing_over()
                return tables() if kg is None else kg.recorded_tables(tables())

            c.key_group_tables = recorded
        c.also_busy = lambda: bool(self._held) or self.in_progress()
        c.rebalance_in_progress = self.in_progress
        if self._engine.local is not None:
            # a failure during a hand-over rolls the whole topology back
            self._engine.local.vetoes.append(self._veto)
        flow.hold = self._intercept

    # -- queries -----------------------------------------------------------------------

    def _veto(self, _rt: TaskRuntime) -> str | None:
        """Task scope's veto: none while no rebalance is under way."""
        if self.in_progress():
            return "a live rebalance is under way (its hand-over recovers globally)"
        return None

    def _phase(self) -> Phase | None:
        return self.history[-1].phase if self.history else None

    def in_progress(self) -> bool:
        """Whether a rebalance is under way: failures now must roll back globally."""
        return self._phase() not in (None, Phase.DONE)

    def components(self) -> dict[str, ComponentInfo]:
        """What the run tells ``sr3 rebalance`` about each component now."""
        engine = self._engine
        found: dict[str, ComponentInfo] = {}
        for name in engine.topology.components:
            ids = engine.router.component_tasks(name)
            rt = engine.tasks[ids[0]]
            groups = Sr3Config.from_mapping(rt.conf, strict=False).ring.key_group_count
            fixed = fixed_parallelism(rt.component.component_cls) or ""
            found[name] = ComponentInfo(len(ids), is_stateful_bolt(rt), groups, fixed)
        return found

    def ownership(self) -> dict[str, list[dict[str, Any]]]:
        """Task ids, indexes, owners and states of every stateful component."""
        engine = self._engine
        out: dict[str, list[dict[str, Any]]] = {}
        for name, info in self.components().items():
            if not info.stateful:
                continue
            out[name] = [
                {
                    "task": task_id,
                    "index": index,
                    "of": info.tasks,
                    "owner": owner_name(engine.topology.name, name, index),
                    "state": engine.tasks[task_id].state.value,
                    "processed": engine.tasks[task_id].processed,
                    "pid": engine.tasks[task_id].pid,
                    "held": task_id in self._holding,
                }
                for index, task_id in enumerate(engine.router.component_tasks(name))
            ]
            table = engine.router.key_groups.get(name)
            if table is not None:
                kg = self._handing_over()
                for task in out[name]:
                    task["key_groups"] = key_group_ranges(table, task["index"])
                    task["held"] = kg is not None and kg.holds(task["task"])
        return out

    # -- requests ----------------------------------------------------------------------

    def request(self, rebalance_id: str, targets: Mapping[str, int]) -> Rebalance:
        """Accept a rebalance; it starts at the next epoch's barrier.

        Raises:
            RebalanceRequestError: another rebalance is under way, or the
                request names an unknown or stateless component or a count
                outside ``1..max``; nothing changes.
        """
        name = self._engine.topology.name
        if self.in_progress():
            current = self.history[-1]
            msg = (
                f"topology {name!r} is already rebalancing ({current.rebalance_id}, "
                f"{current.phase.value}); wait for it to finish, then ask again"
            )
            raise RebalanceRequestError(msg)
        components = self.components()
        check_request(name, components, targets)
        change = {c: (components[c].tasks, n) for c, n in targets.items()}
        rebalance = Rebalance(rebalance_id, change, self._clock())
        # a task that got the open epoch's barrier before now processed tuples
        # past it unheld: only a later epoch may hand over
        rebalance.first_epoch = self._coordinator.next_epoch
        self.history.append(rebalance)
        if all(a == b for a, b in change.values()):
            rebalance.ended_at = rebalance.requested_at
            rebalance.move(Phase.DONE)
        elif all(c in self._engine.router.key_groups for c in change):
            self._kg = KeyGroupHandOver(
                self._engine,
                rebalance,
                batch_size=int(
                    read_setting(self._engine.conf, "sr3.rebalance.batch.key.groups")
                ),
                clock=self._clock,
                grow=self._grow,
                retire=self._task_lists.retire_above,
            )
        else:
            self._kg = None
        logger.info("rebalance %s of %s accepted: %s", rebalance_id, name, change)
        self._changed()
        return rebalance

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- hand-over ---------------------------------------------------------------------

    def _handing_over(self) -> KeyGroupHandOver | None:
        """The key-groups hand-over under way, if the current rebalance is one."""
        kg = self._kg
        if kg is None or kg.rebalance.phase is Phase.DONE:
            return None
        return kg

    def _key_groups_done(self, rt: TaskRuntime, params: Any) -> None:
        if self._kg is not None:  # install reports may come after DONE
            self._kg.key_groups_done(rt, params)
            self._changed()

    def _in_hand_over(self, call: Callable[[KeyGroupHandOver], None]) -> bool:
        """Pass a hook to the key-groups hand-over under way, if one is (True).

        The live record is published again if its phase changed.
        """
        kg = self._handing_over()
        if kg is None:
            return False
        phase = kg.rebalance.phase
        call(kg)
        if kg.rebalance.phase is not phase:
            self._changed()
        return True

    def _captured(self, rt: TaskRuntime, epoch: int) -> None:
        self._in_hand_over(lambda kg: kg.captured(rt, epoch))

    def _written(self, rt: TaskRuntime, epoch: int) -> None:
        self._in_hand_over(lambda kg: kg.written(rt, epoch))

    def _barrier_sent(self, rt: TaskRuntime, epoch: int) -> None:
        if self._in_hand_over(lambda kg: kg.barrier_sent(rt, epoch)):
            return
        rebalance = self.history[-1] if self.history else None
        if rebalance is None or rt.component.name not in rebalance.targets:
            return
        if rebalance.phase is Phase.ARMED and epoch >= rebalance.first_epoch:
            rebalance.move(Phase.HOLDING)
            rebalance.epoch = epoch
            rebalance.attempts += 1
            self._unmoved_base = self._unmoved(rebalance)
            self._changed()
        if rebalance.phase is Phase.HOLDING and rebalance.epoch == epoch:
            self._holding.setdefault(rt.task_id, self._clock())

    def _unmoved(self, rebalance: Rebalance) -> dict[int, int]:
        """Processed counts of the bolt tasks the rebalance does not move."""
        return {
            task_id: rt.processed
            for task_id, rt in self._engine.tasks.items()
            if not rt.is_spout and rt.component.name not in rebalance.targets
        }

    def _intercept(self, args: tuple[Any, ...]) -> bool:
        kg = self._handing_over()
        if kg is not None:
            return kg.intercept(args)
        target = args[0]
        if target not in self._holding:
            return False
        if args[1] != SYSTEM_COMPONENT:  # ticks come again: never held
            self._held.append((self._engine.task_to_component[target], args))
            self.history[-1].held += 1
        return True

    def _rolled_back(self) -> None:
        """A rollback drops what was held (the spouts replay it)."""
        kg = self._handing_over()
        if kg is not None:
            kg.rolled_back()
            self._changed()
            return
        self._held.clear()
        rebalance = self.history[-1] if self.history else None
        if rebalance is not None and rebalance.phase is not Phase.DONE:
            rebalance.rollbacks += 1
        if rebalance is not None and rebalance.phase is Phase.HOLDING:
            logger.warning(
                "rebalance %s: rolled back before epoch %s committed; it starts "
                "again at the next epoch",
                rebalance.rebalance_id,
                rebalance.epoch,
            )
            self._note_pauses(rebalance)
            rebalance.epoch = None
            rebalance.first_epoch = self._coordinator.next_epoch
            rebalance.move(Phase.ARMED)
            self._changed()

    def _dropped(self, epoch: int) -> None:
        """Epoch ``epoch`` was abandoned: the old tasks take what was held."""
        kg = self._handing_over()
        if kg is not None:
            kg.dropped(epoch)
            self._changed()
            return
        rebalance = self.history[-1] if self.history else None
        if rebalance is None or rebalance.phase is not Phase.HOLDING:
            return
        if rebalance.epoch != epoch:
            return
        logger.warning(
            "rebalance %s: epoch %s abandoned; it starts again at the next epoch",
            rebalance.rebalance_id,
            epoch,
        )
        self._note_pauses(rebalance)
        held, self._held = self._held, []
        rebalance.epoch = None
        rebalance.first_epoch = self._coordinator.next_epoch
        rebalance.move(Phase.ARMED)
        for _name, args in held:
            self._engine.flow.deliver_now(*args)
        self._changed()

    def _note_pauses(self, rebalance: Rebalance) -> None:
        now = self._clock()
        for task_id, since in self._holding.items():
            rebalance.pauses[task_id] = max(
                rebalance.pauses.get(task_id, 0.0), now - since
            )
        self._holding.clear()

    def _committed(self, epoch: int) -> None:
        kg = self._handing_over()
        if kg is not None:
            kg.committed_epoch(epoch)
            self._changed()
            return
        rebalance = self.history[-1] if self.history else None
        if rebalance is None or rebalance.phase is not Phase.HOLDING:
            return
        if rebalance.epoch != epoch:
            return
        rebalance.move(Phase.SWITCHING)
        rebalance.switched_at = self._clock()
        self._switch(rebalance)
        self._changed()

    def _switch(self, rebalance: Rebalance) -> None:
        """Change the task lists of the rebalanced components (no epoch is open)."""
        self._moves = self._task_lists.replace(
            {name: after for name, (_before, after) in rebalance.targets.items()}
        )
        for moves in self._moves.values():
            self._restoring.update(moves.after)
        logger.info(
            "rebalance %s: epoch %s committed, tasks now %s",
            rebalance.rebalance_id,
            rebalance.epoch,
            {n: list(m.after) for n, m in self._moves.items()},
        )

    def _grow(self, name: str, count: int) -> list[int]:
        """Start ``count`` tasks of ``name`` owning no key group yet."""
        table = table_conf(self._engine.router.key_groups[name])
        return self._task_lists.grow(name, count, {TABLE_CONF_KEY: table})

    def _restored(self, rt: TaskRuntime, params: Any) -> None:
        kg = self._handing_over()
        if kg is not None:
            kg.restored(rt)
            self._changed()
            return
        rebalance = self.history[-1] if self.history else None
        if rebalance is None or rebalance.phase is not Phase.SWITCHING:
            return
        if rt.task_id in self._restoring:
            self._restoring.discard(rt.task_id)
            report = dict(params or {})
            rebalance.bytes_moved += int(report.get("bytes") or 0)
        if not self._restoring:
            self._finish(rebalance)

    def _finish(self, rebalance: Rebalance) -> None:
        """Send the held tuples over the new task lists; epochs resume."""
        engine = self._engine
        self._note_pauses(rebalance)
        held, self._held = self._held, []
        for name, (_old, source, source_task, stream, values, anchors) in held:
            try:
                targets = engine.router.reroute(source_task, stream, values, name)
            except RoutingError as exc:
                logger.error("held tuple %r not rerouted: %s", values, exc)
                continue
            for new in targets:
                engine.flow.deliver(new, source, source_task, stream, values, anchors)
        now_processed = self._unmoved(rebalance)
        rebalance.unmoved_processed = sum(
            n - self._unmoved_base.get(t, n) for t, n in now_processed.items()
        )
        rebalance.ended_at = self._clock()
        rebalance.move(Phase.DONE)
        logger.info("rebalance %s done: %s", rebalance.rebalance_id, rebalance)
        self._changed()
