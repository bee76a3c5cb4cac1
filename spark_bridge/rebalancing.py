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

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from backend.access import RingAccess
from backend.owners import owner_name
from spark_bridge.ring import ENGINE
from sr3.config import Sr3Config
from sr3.errors import SR3Error
from topology_api.rebalance_plan import (
    ComponentInfo,
    RebalanceRequestError,
    check_request,
)
from topology_api.topology import LoadedTopology
from zk.rebalances import (
    ACCEPTED,
    DONE,
    REFUSED,
    REQUESTED,
    RebalanceRequest,
    ZkRebalanceStore,
)

__all__ = ["SparkRebalance", "SparkRebalancing", "components_of"]

logger = logging.getLogger(__name__)

#: Longest time between two publications of the live record.
_PUBLISH_S: Final = 0.5


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
            info.tasks, name in stateful, settings.ring.key_group_count
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


class SparkRebalancing:
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
        self._store = ZkRebalanceStore(ring.session)
        self._topology = topology
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._components = dict(components)
        self._incoming: list[RebalanceRequest] = []
        #: Accepted, not yet taken by the runner.
        self._queued: list[tuple[RebalanceRequest, SparkRebalance]] = []
        #: Accepted requests by rebalance id, until reported done.
        self._requests: dict[str, RebalanceRequest] = {}
        self._seen: set[str] = set()
        self.history: list[SparkRebalance] = []
        self._watching = False
        self._thread = threading.Thread(
            target=self._serve, name=f"sr3-spark-rebalance-{topology}", daemon=True
        )

    # -- the runner's thread ---------------------------------------------------------

    def start(self, started: float) -> None:
        """Publish the live record, watch requests (times relative to ``started``).

        ZooKeeper trouble here does not stop the run: the publisher thread
        retries until the record is out and the watch is set.
        """
        self._started = started
        try:
            self._begin()
        except SR3Error as exc:
            logger.warning("rebalance service of %s not ready: %s", self._topology, exc)
        self._thread.start()

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

    def changed(self) -> None:
        """A rebalance moved on (the publisher writes it)."""
        self._wake.set()

    def in_progress(self) -> bool:
        """Whether an accepted rebalance is not done yet."""
        with self._lock:
            return bool(self._queued) or any(not r.done for r in self.history)

    def report(self) -> list[dict[str, Any]]:
        """The run report's ``rebalances``."""
        with self._lock:
            return [r.to_dict(self._started) for r in self.history]

    def close(self) -> None:
        """Stop serving; refuse what was not carried out; the live record goes."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        with self._lock:
            left, self._queued = self._queued, []
        try:
            for request, _rebalance in left:
                self._store.update(
                    self._topology,
                    request,
                    state=REFUSED,
                    detail="the run ended before it could rebalance",
                )
            self._publish()
            self._store.withdraw_live(self._topology)
        except SR3Error as exc:
            logger.warning("live record of %s not withdrawn: %s", self._topology, exc)

    # -- kazoo's thread ----------------------------------------------------------------

    def _requested(self, request: RebalanceRequest | None) -> None:
        if request is None or request.state != REQUESTED:
            return
        with self._lock:
            if request.request_id in self._seen:
                return
            self._seen.add(request.request_id)
            self._incoming.append(request)
        self._wake.set()

    # -- the publisher thread ----------------------------------------------------------

    def _begin(self) -> None:
        self._store.publish_live(self._topology, self._view())
        found = self._store.get(self._topology)
        if found is not None and found[0].state == REQUESTED:
            # a request left by a run that ended before taking it is stale
            self._store.update(
                self._topology,
                found[0],
                state=REFUSED,
                detail="no run took this request before it ended",
            )
            self._seen.add(found[0].request_id)
        self._store.watch(self._topology, self._requested)
        self._watching = True

    def _serve(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(_PUBLISH_S)
            self._wake.clear()
            try:
                if not self._watching:
                    self._begin()
                self._take_requests()
                self._publish()
            except SR3Error as exc:  # ZooKeeper trouble: try again next round
                logger.warning("rebalance service of %s: %s", self._topology, exc)

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

    def _take_requests(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
        for request in incoming:
            try:
                self._accept(request)
            except RebalanceRequestError as exc:
                logger.warning("rebalance %s refused: %s", request.request_id, exc)
                self._store.update(
                    self._topology, request, state=REFUSED, detail=str(exc)
                )
                continue
            logger.info(
                "rebalance %s of %s accepted: %s (a controlled restart on Spark)",
                request.request_id,
                self._topology,
                dict(request.targets),
            )
            self._store.update(
                self._topology,
                request,
                state=ACCEPTED,
                detail=f"accepted by Spark run pid {os.getpid()} (a restart)",
            )

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
