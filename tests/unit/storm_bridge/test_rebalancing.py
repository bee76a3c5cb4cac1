"""A run's rebalance service: ZooKeeper trouble while the run starts does not end it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sr3.errors import SessionLostError
from storm_bridge.rebalancing import LiveRebalancing
from topology_api import rebalance_service
from zk.rebalances import RebalanceRequest


class _Store:
    """The ZooKeeper store, whose session is lost for the first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.live: dict[str, Any] | None = None
        self.watching = threading.Event()

    def _call(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            msg = "publish the live run of 'wc': the ZooKeeper session expired"
            raise SessionLostError(msg)

    def publish_live(self, _topology: str, info: dict[str, Any]) -> None:
        self._call()
        self.live = dict(info)

    def get(self, _topology: str) -> tuple[RebalanceRequest, int] | None:
        self._call()
        return None

    def watch(
        self, _topology: str, _callback: Callable[[RebalanceRequest | None], None]
    ) -> None:
        self._call()
        self.watching.set()

    def withdraw_live(self, _topology: str) -> None:
        self.live = None


class _Cluster:
    def with_rebalancer(self, _act: Callable[[Any], Any]) -> Any:
        return None


class _Ring:
    session = None


@pytest.mark.parametrize("failures", [0, 1, 3])
def test_a_session_lost_at_the_start_is_retried_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    store = _Store(failures)
    monkeypatch.setattr(rebalance_service, "ZkRebalanceStore", lambda _session: store)
    # the fakes stand for the cluster and the ring: only the store is used
    live = LiveRebalancing(_Cluster(), _Ring(), "wc")  # type: ignore[arg-type]
    live.start(time.monotonic())  # does not raise
    try:
        assert store.watching.wait(10.0), "the request watch was never set"
        deadline = time.monotonic() + 10.0
        while store.live is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.live is not None
    finally:
        live.close()
    assert store.live is None  # withdrawn at the end
