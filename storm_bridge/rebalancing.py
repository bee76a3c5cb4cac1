"""A running ``sr3 run``'s side of ``sr3 rebalance``: requests in, status out.

The run publishes its components, task ownership and rebalance in progress in
an ephemeral znode (:class:`zk.rebalances.ZkRebalanceStore`), watches the
topology's rebalance request and hands each new one to the cluster's
:class:`~storm_bridge.cluster.rebalance.Rebalancer`. ZooKeeper calls never run
on the cluster thread: a publisher thread writes what changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from sr3.errors import SR3Error
from storm_bridge.cluster import LocalCluster
from storm_bridge.cluster.rebalance import Phase, Rebalancer
from storm_bridge.wiring import RingAccess
from topology_api.rebalance_plan import RebalanceRequestError
from zk.rebalances import (
    ACCEPTED,
    DONE,
    REFUSED,
    REQUESTED,
    RebalanceRequest,
    ZkRebalanceStore,
)

__all__ = ["LiveRebalancing"]

logger = logging.getLogger(__name__)

#: Longest time between two publications of the live record.
_PUBLISH_S: Final = 0.5


class LiveRebalancing:
    """Serves ``sr3 rebalance`` and ``sr3 status`` for one running run.

    Args:
        cluster: The running cluster (with checkpoints: it has a rebalancer).
        ring: The run's ring and ZooKeeper handles.
        topology: The topology name.
        clock: Monotonic clock in seconds (the cluster's).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        ring: RingAccess,
        topology: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self._store = ZkRebalanceStore(ring.session)
        self._topology = topology
        self._clock = clock
        self._started = clock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._incoming: list[RebalanceRequest] = []
        #: Accepted requests not yet reported done, by request id.
        self._accepted: dict[str, RebalanceRequest] = {}
        self._seen: set[str] = set()
        #: Whether the request watch is set (the start's ZooKeeper calls worked).
        self._watching = False
        self._thread = threading.Thread(
            target=self._serve, name=f"sr3-rebalance-{topology}", daemon=True
        )

    def start(self, started: float) -> None:
        """Publish the live record, watch requests (times relative to ``started``).

        ZooKeeper trouble here does not stop the run: the publisher thread
        retries until the record is out and the watch is set.
        """
        self._started = started

        def changed() -> None:
            self._wake.set()

        self._cluster.with_rebalancer(lambda r: setattr(r, "on_change", changed))
        try:
            self._begin()
        except SR3Error as exc:
            # ZooKeeper down or the session lost while the run starts: the run
            # goes on; the publisher thread tries again every round
            logger.warning(
                "rebalance service of %s not ready, retried every %s s: %s",
                self._topology,
                _PUBLISH_S,
                exc,
            )
        self._thread.start()

    def _begin(self) -> None:
        """Publish the live record, retire a stale request, watch new ones."""
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

    def close(self) -> None:
        """Stop serving; the live record goes."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        try:
            self._publish()
            self._store.withdraw_live(self._topology)
        except SR3Error as exc:
            logger.warning("live record of %s not withdrawn: %s", self._topology, exc)

    def report(self) -> list[dict[str, Any]]:
        """The run report's ``rebalances``: each with start, end, bytes, pause."""

        def entries(r: Rebalancer) -> list[dict[str, Any]]:
            return [b.to_dict(self._started) for b in r.history]

        return list(self._cluster.with_rebalancer(entries) or [])

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

    def _take_requests(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
        for request in incoming:

            def ask(r: Rebalancer, req: RebalanceRequest = request) -> str:
                return r.request(req.request_id, req.targets).rebalance_id

            try:
                self._cluster.with_rebalancer(ask)
            except RebalanceRequestError as exc:
                logger.warning("rebalance %s refused: %s", request.request_id, exc)
                self._store.update(
                    self._topology, request, state=REFUSED, detail=str(exc)
                )
                continue
            self._accepted[request.request_id] = request
            self._store.update(
                self._topology,
                request,
                state=ACCEPTED,
                detail=f"accepted by run pid {os.getpid()}",
            )

    def _publish(self) -> None:
        self._store.publish_live(self._topology, self._view())
        for entry in self.report():
            request = self._accepted.get(entry["id"])
            if request is not None and entry["phase"] == Phase.DONE.value:
                del self._accepted[entry["id"]]
                self._store.update(
                    self._topology,
                    request,
                    state=DONE,
                    detail="rebalanced",
                    result=entry,
                )

    def _view(self) -> dict[str, Any]:
        def view(r: Rebalancer) -> dict[str, Any]:
            current = r.history[-1] if r.in_progress() else None
            return {
                "pid": os.getpid(),
                "components": {n: c.to_dict() for n, c in r.components().items()},
                "ownership": r.ownership(),
                "rebalance": None
                if current is None
                else current.to_dict(self._started),
                "rebalances": len(r.history),
            }

        return dict(self._cluster.with_rebalancer(view) or {})
