"""What a local cluster shows of its engine, each answer read under the cluster lock.

:class:`ClusterView` is the read side of
:class:`~storm_bridge.cluster.local.LocalCluster`: counters, events, errors,
task failures, pending tuples, sink outputs, task ids and pids, why the
topology is busy, and access to its checkpoint coordinator and live
rebalancer. The lifecycle, the engine thread, control and waits stay in
``local.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.engine import Engine
from storm_bridge.cluster.events import ClusterEvent, ComponentCounters, EventKind
from storm_bridge.cluster.health import TaskFailure, never_up, task_failures
from storm_bridge.cluster.rebalance import Rebalancer
from storm_bridge.errors import StormBridgeError
from topology_api.topology import LoadedTopology

__all__ = ["ClusterView"]


class ClusterView:
    """The read side of a local cluster (a base of :class:`LocalCluster`).

    Attributes:
        topology: The loaded topology.
    """

    topology: LoadedTopology
    _engine: Engine
    _lock: threading.RLock
    _rebalancer: Rebalancer | None

    # -- checkpoints and rebalances ----------------------------------------------------

    def with_coordinator(self, read: Callable[[Coordinator], Any]) -> Any:
        """Return ``read(coordinator)`` under the lock (None: no checkpoints)."""
        with self._lock:
            coordinator = self._engine.coordinator
            return None if coordinator is None else read(coordinator)

    def with_rebalancer(self, act: Callable[[Rebalancer], Any]) -> Any:
        """Return ``act(rebalancer)`` under the lock (None: no checkpoints)."""
        with self._lock:
            rebalancer = self._rebalancer
            return None if rebalancer is None else act(rebalancer)

    def rebalance_in_progress(self) -> bool:
        """Whether a live rebalance is under way (failures must roll back globally)."""
        return bool(self.with_rebalancer(lambda r: r.in_progress()))

    # -- observation -------------------------------------------------------------------

    def _never_up(self) -> bool:
        return bool(never_up(self._engine.tasks.values()))

    def cannot_come_up(self) -> bool:
        """Whether a task's last subprocesses all died before coming up."""
        with self._lock:
            return self._never_up()

    def busy_reason(self, *, empty_nexts: int = 5) -> str | None:
        """Why the topology is not idle now (None when it is)."""
        with self._lock:
            return self._engine.busy_reason(empty_nexts)

    def quiet_waited_s(self) -> float:
        """Time :meth:`run_until_idle` spent only on spouts' quiet periods."""
        with self._lock:
            return self._engine.quiet_waited_s

    def spout_emits(self) -> int:
        """Tuples the spouts emitted so far, replays included (a change detector)."""
        with self._lock:
            names = {
                rt.component.name for rt in self._engine.tasks.values() if rt.is_spout
            }
            counters = self._engine.journal.counters
            return sum(counters[n].emitted for n in names if n in counters)

    def pending_tuples(self) -> dict[str, int]:
        """Tuples waiting at each component: a spout's open trees, a bolt's unacked."""
        with self._lock:
            found: dict[str, int] = {}
            for rt in self._engine.tasks.values():
                waiting = len(rt.pending) if rt.is_spout else len(rt.inputs)
                name = rt.component.name
                found[name] = found.get(name, 0) + waiting
            return found

    def counters(self) -> dict[str, ComponentCounters]:
        """Snapshot of the counters, by component id."""
        with self._lock:
            return {name: c.copy() for name, c in self._engine.journal.counters.items()}

    def complete_latency(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Complete latency of the acked tuple trees (ms): all spouts, each spout."""
        with self._lock:
            journal = self._engine.journal
            spouts = {name: s.summary() for name, s in journal.latencies.items()}
            return journal.complete_latency.summary(), spouts

    def events(
        self, kind: EventKind | None = None, component: str | None = None
    ) -> list[ClusterEvent]:
        """The event log, oldest first, optionally filtered."""
        with self._lock:
            return self._engine.journal.events.select(kind, component)

    def errors(self) -> list[StormBridgeError]:
        """Errors that killed tasks (protocol errors, timeouts, exits), oldest first."""
        with self._lock:
            return list(self._engine.journal.errors)

    def ended_at(self, task_id: int) -> float | None:
        """When the task's last subprocess died or was recycled (None: never)."""
        with self._lock:
            return self._engine.journal.ended_at.get(task_id)

    def task_failures(self) -> list[TaskFailure]:
        """The tasks that died on their own (not on request, not by a rollback).

        Each says whether it came back, kept crashing or is still down.
        """
        with self._lock:
            engine = self._engine
            indexes = {
                task_id: engine.router.component_tasks(rt.component.name).index(task_id)
                for task_id, rt in engine.tasks.items()
            }
            return task_failures(engine.tasks.values(), indexes)

    def outputs(self) -> dict[str, dict[str, list[Any]]]:
        """Last output per key of each sink component (see :mod:`topology_api.outputs`).

        Returns:
            ``{component: {json.dumps(key values): values}}``, keys sorted.
        """
        return self._engine.outputs.to_dict()

    def task_ids(self, component: str) -> list[int]:
        """Sorted task ids of a component."""
        return self._engine.router.component_tasks(component)

    def straggler_events(self) -> list[dict[str, Any]]:
        """The straggler policy's events of this run (the report's ``stragglers``)."""
        with self._lock:
            return self._engine.stragglers.report()

    def task_pid(self, task_id: int) -> int | None:
        """Pid of a task's current subprocess (None while it restarts)."""
        with self._lock:
            return self._engine.pid_of(task_id)

    @property
    def conf(self) -> Mapping[str, Any]:
        """The topology-wide Storm conf."""
        return self._engine.conf

    @property
    def task_to_component(self) -> Mapping[int, str]:
        """Task id -> component id, the acker's tasks included."""
        return self._engine.task_to_component

    @property
    def stateful_components(self) -> list[str]:
        """Components whose class declares itself stateful."""
        return self.topology.stateful_components
