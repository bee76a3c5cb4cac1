"""A running ``sr3 run``'s side of ``sr3 rebalance``: requests in, status out.

The run publishes its components, task ownership and rebalance in progress in
an ephemeral znode, watches the topology's rebalance request and hands each new
one to the cluster's :class:`~storm_bridge.cluster.rebalance.Rebalancer`
(:class:`~topology_api.rebalance_service.RebalanceService` serves the requests;
ZooKeeper calls never run on the cluster thread).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from storm_bridge.cluster import LocalCluster
from storm_bridge.cluster.rebalance import Phase, Rebalancer
from storm_bridge.wiring import RingAccess
from topology_api.rebalance_service import RebalanceService
from zk.rebalances import DONE, RebalanceRequest

__all__ = ["LiveRebalancing"]


class LiveRebalancing(RebalanceService):
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
        super().__init__(
            ring.session,
            topology,
            thread_name=f"sr3-rebalance-{topology}",
            accepted_detail="accepted by the run",
            clock=clock,
        )
        self._cluster = cluster
        #: Accepted requests not yet reported done, by request id.
        self._accepted: dict[str, RebalanceRequest] = {}

    def start(self, started: float) -> None:
        """Publish the live record, watch requests (times relative to ``started``)."""
        self._cluster.with_rebalancer(lambda r: setattr(r, "on_change", self.changed))
        super().start(started)

    def report(self) -> list[dict[str, Any]]:
        """The run report's ``rebalances``: each with start, end, bytes, pause."""

        def entries(r: Rebalancer) -> list[dict[str, Any]]:
            return [b.to_dict(self._started) for b in r.history]

        return list(self._cluster.with_rebalancer(entries) or [])

    def _accept(self, request: RebalanceRequest) -> None:
        def ask(r: Rebalancer) -> str:
            return r.request(request.request_id, request.targets).rebalance_id

        self._cluster.with_rebalancer(ask)
        self._accepted[request.request_id] = request

    def _left_over(self) -> list[RebalanceRequest]:
        """Accepted requests whose rebalance is not done (the run ends)."""
        done = {e["id"] for e in self.report() if e["phase"] == Phase.DONE.value}
        left = [r for i, r in self._accepted.items() if i not in done]
        for request in left:
            del self._accepted[request.request_id]
        return left

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
