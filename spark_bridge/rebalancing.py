"""A Spark run's side of ``sr3 rebalance``: a controlled restart, state from the ring.

Spark fixes the state partitions of a query for the life of its checkpoint
(SPARK-53942), so a running query cannot change a stateful bolt's task count.
Our state lives in the ring, though: the run stops the query once its current
micro-batch committed (an epoch), and starts a new one in the same session
from that epoch at the new task counts, as ``--resume`` at another
parallelism does (state re-partitioned by key; spout offsets from the epoch).
Every key pauses, from the stop to the new query's first committed batch.

:class:`SparkRebalancing` publishes the run's live record (the Storm engine's
shape, ``"engine": "spark"``), watches requests, refuses bad ones with
:func:`~topology_api.rebalance_plan.check_request`, and queues accepted ones
for the runner (:mod:`spark_bridge.runner`), which restarts the query and
calls :meth:`SparkRebalancing.finish`. ZooKeeper calls never run on the
runner's thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backend.access import RingAccess
from backend.owners import owner_name
from spark_bridge.ring import ENGINE
from sr3.config import Sr3Config
from topology_api.contract import fixed_parallelism
from topology_api.rebalance_plan import (
    ComponentInfo,
    RebalanceRequestError,
    check_request,
)
from topology_api.rebalance_service import RebalanceService
from topology_api.topology import LoadedTopology
from zk.rebalances import DONE, RebalanceRequest

__all__ = ["SparkRebalance", "SparkRebalancing", "components_of"]


def components_of(
    topology: LoadedTopology, stateful: tuple[str, ...], conf: Mapping[str, Any]
) -> dict[str, ComponentInfo]:
    """What the run tells ``sr3 rebalance`` about each component (loaded counts).

    The maximum is the component's key-group count (``sr3.state.key.groups``
    of the topology, ``-o`` and component conf, as the ring's owners use).
    """
    found: dict[str, ComponentInfo] = {}
    for name, info in topology.components.items():
        settings = Sr3Config.merged(topology.config, conf, info.config or {})
        found[name] = ComponentInfo(
            info.tasks,
            name in stateful,
            settings.ring.key_group_count,
            fixed_parallelism(info.component_cls) or "",
        )
    return found


@dataclass
class SparkRebalance:
    """One rebalance of a Spark run (clock readings in seconds).

    Attributes:
        rebalance_id: The request's id.
        targets: ``{component: (tasks before, tasks after)}``.
        requested_at: When the run accepted it.
        stopped_at: When the old query took no more batches (every key paused).
        switched_at: When the new query started.
        ended_at: When the new query committed its first batch (keys resumed).
        epoch: The committed epoch the new query started from.
        bytes_moved: State bytes the new query's tasks read from the ring.
    """

    rebalance_id: str
    targets: dict[str, tuple[int, int]]
    requested_at: float
    stopped_at: float | None = None
    switched_at: float | None = None
    ended_at: float | None = None
    epoch: int | None = None
    bytes_moved: int = 0

    @property
    def done(self) -> bool:
        """Whether the new query committed its first batch."""
        return self.ended_at is not None

    def to_dict(self, started: float = 0.0) -> dict[str, Any]:
        """Return the run report's entry (the Storm engine's fields).

        Spark holds no tuples back and nothing keeps processing: ``held_tuples``
        and ``unmoved_processed`` are 0, and the longest key pause is the whole
        restart (stop to the new query's first committed batch).
        """

        def rel(at: float | None) -> float | None:
            return None if at is None else round(at - started, 3)

        pause = (
            0.0
            if self.stopped_at is None or self.ended_at is None
            else self.ended_at - self.stopped_at
        )
        return {
            "id": self.rebalance_id,
            "targets": {c: {"from": a, "to": b} for c, (a, b) in self.targets.items()},
            "phase": "done" if self.done else "restarting",
            "epoch": self.epoch,
            "attempts": 1,
            "start_s": rel(self.requested_at),
            "switch_s": rel(self.switched_at),
            "end_s": rel(self.ended_at),
            "bytes_moved": self.bytes_moved,
            "longest_key_pause_s": round(pause, 4),
            "held_tuples": 0,
            "unmoved_processed": 0,
            "rollbacks": 0,
            "how": "restart",
        }


class SparkRebalancing(RebalanceService):
    """Serves ``sr3 rebalance`` and ``sr3 status`` for one running Spark run.

    Args:
        ring: The run's ring and ZooKeeper handles.
        topology: The topology name.
        components: The run's components as loaded now.
        clock: Monotonic clock in seconds (the runner's).
    """

    def __init__(
        self,
        ring: RingAccess,
        topology: str,
        components: Mapping[str, ComponentInfo],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            ring.session,
            topology,
            thread_name=f"sr3-spark-rebalance-{topology}",
            accepted_detail="accepted by the Spark run (a controlled restart)",
            clock=clock,
        )
        self._components = dict(components)
        #: Accepted, not yet taken by the runner.
        self._queued: list[tuple[RebalanceRequest, SparkRebalance]] = []
        #: Accepted requests by rebalance id, until reported done.
        self._requests: dict[str, RebalanceRequest] = {}
        self.history: list[SparkRebalance] = []

    # -- the runner's thread ---------------------------------------------------------

    def pending(self) -> bool:
        """Whether an accepted rebalance waits for the runner."""
        with self._lock:
            return bool(self._queued)

    def take(self) -> SparkRebalance | None:
        """Return the next accepted rebalance to carry out, if any."""
        with self._lock:
            if not self._queued:
                return None
            _request, rebalance = self._queued.pop(0)
            return rebalance

    def switched(self, components: Mapping[str, ComponentInfo]) -> None:
        """The new query runs with ``components``' task counts."""
        with self._lock:
            self._components = dict(components)
        self._wake.set()

    def in_progress(self) -> bool:
        """Whether an accepted rebalance is not done yet."""
        with self._lock:
            return bool(self._queued) or any(not r.done for r in self.history)

    def report(self) -> list[dict[str, Any]]:
        """The run report's ``rebalances``."""
        with self._lock:
            return [r.to_dict(self._started) for r in self.history]

    # -- the publisher thread ----------------------------------------------------------

    def _left_over(self) -> list[RebalanceRequest]:
        """Accepted requests not done: queued, or taken by a restart that failed."""
        with self._lock:
            self._queued = []
            unfinished = [r.rebalance_id for r in self.history if not r.done]
            return [self._requests.pop(i) for i in unfinished if i in self._requests]

    def _accept(self, request: RebalanceRequest) -> None:
        """Queue ``request`` for the runner.

        Raises:
            RebalanceRequestError: another rebalance is under way, or the
                request is not one the run can carry out; nothing changes.
        """
        with self._lock:
            if self._queued or any(not r.done for r in self.history):
                msg = (
                    f"topology {self._topology!r} is already rebalancing; wait for "
                    "it to finish, then ask again"
                )
                raise RebalanceRequestError(msg)
            check_request(self._topology, self._components, request.targets)
            change = {
                c: (self._components[c].tasks, n) for c, n in request.targets.items()
            }
            rebalance = SparkRebalance(request.request_id, change, self._clock())
            self._requests[rebalance.rebalance_id] = request
            if all(a == b for a, b in change.values()):
                # nothing to move: done at once, the query goes on
                rebalance.stopped_at = rebalance.switched_at = rebalance.requested_at
                rebalance.ended_at = rebalance.requested_at
            else:
                self._queued.append((request, rebalance))
            self.history.append(rebalance)

    def _publish(self) -> None:
        self._store.publish_live(self._topology, self._view())
        with self._lock:
            finished = [
                (self._requests.pop(r.rebalance_id), r.to_dict(self._started))
                for r in self.history
                if r.done and r.rebalance_id in self._requests
            ]
        for request, entry in finished:
            self._store.update(
                self._topology,
                request,
                state=DONE,
                detail="rebalanced by a controlled restart",
                result=entry,
            )

    def _view(self) -> dict[str, Any]:
        with self._lock:
            current = next((r for r in self.history if not r.done), None)
            components = dict(self._components)
            count = len(self.history)
        return {
            "pid": os.getpid(),
            "engine": ENGINE,
            "components": {n: c.to_dict() for n, c in components.items()},
            "ownership": {
                name: [
                    {
                        "task": index,
                        "index": index,
                        "of": info.tasks,
                        "owner": owner_name(self._topology, name, index),
                        "state": "restarting" if current is not None else "running",
                        "processed": None,
                        "pid": os.getpid(),
                        "held": current is not None,
                    }
                    for index in range(info.tasks)
                ]
                for name, info in components.items()
                if info.stateful
            },
            "rebalance": None if current is None else current.to_dict(self._started),
            "rebalances": count,
        }
