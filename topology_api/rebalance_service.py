"""A running run's service of ``sr3 rebalance`` requests, for either engine.

:class:`RebalanceService` publishes the run's live record in an ephemeral
znode (:class:`zk.rebalances.ZkRebalanceStore`), retires a request a run that
ended left behind, watches the topology's request znode and, on its own
publisher thread, accepts or refuses each new request and republishes what
changed. ZooKeeper calls never run on the engine's thread. An engine says how a
request is accepted and what the live record holds:
:class:`storm_bridge.rebalancing.LiveRebalancing` (the local cluster's live
hand-over) and :class:`spark_bridge.rebalancing.SparkRebalancing` (a
controlled restart of the query).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from sr3.errors import SR3Error
from topology_api.rebalance_plan import RebalanceRequestError
from zk.client import ZkSession
from zk.rebalances import (
    ACCEPTED,
    REFUSED,
    REQUESTED,
    RebalanceRequest,
    ZkRebalanceStore,
)

__all__ = ["PUBLISH_S", "RebalanceService"]

logger = logging.getLogger(__name__)

#: Longest time between two publications of the live record.
PUBLISH_S: Final = 0.5

#: Most characters of a run's failure kept in a refused request's detail.
_FAILURE_CHARS: Final = 400


class RebalanceService:
    """Serves ``sr3 rebalance`` and ``sr3 status`` for one running run.

    Subclasses implement :meth:`_accept`, :meth:`_publish` and :meth:`_view`.

    Args:
        session: The run's ZooKeeper session.
        topology: The topology name.
        thread_name: Name of the publisher thread.
        accepted_detail: What an accepted request's znode says.
        clock: Monotonic clock in seconds (the engine's).
    """

    def __init__(
        self,
        session: ZkSession,
        topology: str,
        *,
        thread_name: str,
        accepted_detail: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = ZkRebalanceStore(session)
        self._topology = topology
        self._clock = clock
        self._started = clock()
        self._accepted_detail = accepted_detail
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._incoming: list[RebalanceRequest] = []
        self._seen: set[str] = set()
        #: Whether the request watch is set (the start's ZooKeeper calls worked).
        self._watching = False
        self._thread = threading.Thread(
            target=self._serve, name=thread_name, daemon=True
        )

    # -- the engine's side -------------------------------------------------------------

    def start(self, started: float) -> None:
        """Publish the live record, watch requests (times relative to ``started``).

        ZooKeeper trouble here does not stop the run: the publisher thread
        retries every :data:`PUBLISH_S` until the record is out and the watch
        is set.
        """
        self._started = started
        try:
            self._begin()
        except SR3Error as exc:
            # ZooKeeper down or the session lost while the run starts: the run
            # goes on; the publisher thread tries again every round
            logger.warning(
                "rebalance service of %s not ready, retried every %s s: %s",
                self._topology,
                PUBLISH_S,
                exc,
            )
        self._thread.start()

    def changed(self) -> None:
        """A rebalance moved on: the publisher writes it now."""
        self._wake.set()

    def close(self, failure: str | None = None) -> None:
        """Stop serving; refuse what was not carried out; the live record goes.

        Args:
            failure: Why the run ended, when it failed: an accepted request left
                unfinished is refused naming it, so ``sr3 rebalance`` says why.
        """
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        detail = "the run ended before it could rebalance"
        if failure is not None:
            if len(failure) > _FAILURE_CHARS:
                failure = failure[: _FAILURE_CHARS - 3] + "..."
            detail = (
                f"the run failed before the rebalance finished: {failure}; the "
                "ring keeps the last committed epoch (sr3 run --resume)"
            )
        try:
            for request in self._left_over():
                self._store.update(
                    self._topology, request, state=REFUSED, detail=detail
                )
            self._publish()
            self._store.withdraw_live(self._topology)
        except SR3Error as exc:
            logger.warning("live record of %s not withdrawn: %s", self._topology, exc)

    # -- what an engine provides -------------------------------------------------------

    def _accept(self, request: RebalanceRequest) -> None:
        """Hand ``request`` to the engine.

        Raises:
            RebalanceRequestError: the run cannot carry it out; nothing changed.
        """
        raise NotImplementedError

    def _publish(self) -> None:
        """Write the live record and mark the requests that are done."""
        raise NotImplementedError

    def _view(self) -> dict[str, Any]:
        """The live record: pid, components, ownership, the rebalance under way."""
        raise NotImplementedError

    def _left_over(self) -> list[RebalanceRequest]:
        """Accepted requests the engine did not finish (refused at close)."""
        return []

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
        """Publish the live record, retire a stale request, watch new ones."""
        self._store.publish_live(self._topology, self._view())
        found = self._store.get(self._topology)
        if found is not None and found[0].open:
            # a request left open by a run that ended (killed before it took
            # or finished it) is stale: this run starts from the ring's epoch
            detail = (
                "no run took this request before it ended"
                if found[0].state == REQUESTED
                else "the run that accepted it ended before finishing it"
            )
            self._store.update(self._topology, found[0], state=REFUSED, detail=detail)
            self._seen.add(found[0].request_id)
        self._store.watch(self._topology, self._requested)
        self._watching = True

    def _serve(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(PUBLISH_S)
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
            try:
                self._accept(request)
            except RebalanceRequestError as exc:
                logger.warning("rebalance %s refused: %s", request.request_id, exc)
                self._store.update(
                    self._topology, request, state=REFUSED, detail=str(exc)
                )
                continue
            logger.info(
                "rebalance %s of %s accepted: %s",
                request.request_id,
                self._topology,
                dict(request.targets),
            )
            self._store.update(
                self._topology,
                request,
                state=ACCEPTED,
                detail=f"{self._accepted_detail} (pid {os.getpid()})",
            )
