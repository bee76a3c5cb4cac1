"""Changing a component's task list on the running local cluster (between epochs).

A rebalance's task restart (:mod:`.rebalance`) replaces the tasks of its
components at once: retired tasks stop, kept tasks restart, new tasks start
(:meth:`TaskLists.replace`). A key-group hand-over (:mod:`.keygroup_rebalance`)
instead starts tasks that own nothing yet (:meth:`TaskLists.grow`) and stops
them once they own nothing again (:meth:`TaskLists.retire_above`). Either way
the router, the checkpoint coordinator and local recovery learn the new task
lists here, in one place; the caller makes sure no epoch is open.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.engine import Engine
from storm_bridge.cluster.settings import TaskSettings
from storm_bridge.cluster.tasks import TaskRuntime, TaskState
from topology_api.rebalance_plan import TaskMoves, plan_moves

__all__ = ["TaskLists"]


class TaskLists:
    """Adds, restarts and retires tasks of one engine (the engine thread only).

    Args:
        engine: The running engine.
        coordinator: Its checkpoint coordinator (told of every new task list).
    """

    def __init__(self, engine: Engine, coordinator: Coordinator) -> None:
        self._engine = engine
        self._coordinator = coordinator

    def replace(self, targets: Mapping[str, int]) -> dict[str, TaskMoves]:
        """Give each component of ``targets`` that many tasks; return the moves.

        Retired tasks stop, kept tasks restart and new tasks start (each
        restores the keys its fields grouping now routes to it).
        """
        engine = self._engine
        moves_by_name: dict[str, TaskMoves] = {}
        for name, after in targets.items():
            current = engine.router.component_tasks(name)
            moves = plan_moves(current, after, self._next_id())
            moves_by_name[name] = moves
            template = engine.tasks[current[0]]
            for task_id in moves.retire:
                self._retire(engine.tasks[task_id])
            for task_id in moves.add:
                self._add(name, task_id, template, dict(template.conf))
        self._retask(tuple(t for m in moves_by_name.values() for t in m.after))
        for moves in moves_by_name.values():
            for task_id in moves.keep:
                engine.supervisor.recycle(engine.tasks[task_id])
            for task_id in moves.add:
                engine.supervisor.spawn(engine.tasks[task_id])
        return moves_by_name

    def grow(self, name: str, count: int, conf: Mapping[str, Any]) -> list[int]:
        """Start ``count`` new tasks of ``name``; return their ids.

        Each gets its template's conf updated with ``conf``; they own no key
        group yet, so each restores nothing.
        """
        engine = self._engine
        current = engine.router.component_tasks(name)
        moves = plan_moves(current, len(current) + count, self._next_id())
        template = engine.tasks[current[0]]
        for task_id in moves.add:
            self._add(name, task_id, template, {**template.conf, **conf})
        self._retask(moves.after)
        for task_id in moves.add:
            engine.supervisor.spawn(engine.tasks[task_id])
        return list(moves.add)

    def retire_above(self, name: str, count: int) -> None:
        """Stop the tasks of ``name`` from index ``count`` on (they own nothing)."""
        engine = self._engine
        moves = plan_moves(engine.router.component_tasks(name), count, self._next_id())
        for task_id in moves.retire:
            self._retire(engine.tasks[task_id])
        self._retask(moves.after)

    def _next_id(self) -> int:
        return max(self._engine.task_to_component) + 1

    def _add(
        self, name: str, task_id: int, template: TaskRuntime, conf: dict[str, Any]
    ) -> None:
        engine = self._engine
        engine.task_to_component[task_id] = name
        engine.tasks[task_id] = TaskRuntime(
            task_id, template.component, conf, TaskSettings.from_conf(conf)
        )

    def _retask(self, after: tuple[int, ...]) -> None:
        engine = self._engine
        engine.router.retask()
        self._coordinator.retask()
        if engine.local is not None:
            engine.local.retask(after)

    def _retire(self, rt: TaskRuntime) -> None:
        engine = self._engine
        if rt.process is not None:
            rt.process.kill()
        engine.flow.drop_task(rt)
        engine.router.reset_task(rt.task_id)
        if rt.state is not TaskState.STOPPED:
            rt.move(TaskState.STOPPED)
        rt.process = None
        del engine.tasks[rt.task_id]
        del engine.task_to_component[rt.task_id]
