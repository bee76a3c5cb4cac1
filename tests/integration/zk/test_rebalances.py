"""ZkRebalanceStore: one open rebalance request at a time, and the live record."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from zk.client import ZkSession
from zk.rebalances import (
    ACCEPTED,
    DONE,
    REQUESTED,
    RebalanceBusyError,
    RebalanceRequest,
    ZkRebalanceStore,
)

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

TOPOLOGY = "word/count"  # '/' in names is quoted into one segment


@pytest.fixture
def store(zk_session: ZkSession) -> ZkRebalanceStore:
    return ZkRebalanceStore(zk_session)


def test_a_request_round_trips_and_moves_through_its_states(
    store: ZkRebalanceStore,
) -> None:
    assert store.get(TOPOLOGY) is None
    made = store.request(TOPOLOGY, {"count": 4})
    found = store.get(TOPOLOGY)
    assert found is not None
    assert found[0] == made
    assert made.state == REQUESTED
    store.update(TOPOLOGY, made, state=DONE, result={"epoch": 3})
    found = store.get(TOPOLOGY)
    assert found is not None
    assert found[0].state == DONE
    assert found[0].result == {"epoch": 3}


def test_an_open_request_of_a_live_run_refuses_another(
    store: ZkRebalanceStore,
) -> None:
    store.publish_live(TOPOLOGY, {"pid": 1, "components": {}})
    first = store.request(TOPOLOGY, {"count": 4})
    store.update(TOPOLOGY, first, state=ACCEPTED)
    with pytest.raises(RebalanceBusyError, match="already rebalancing") as caught:
        store.request(TOPOLOGY, {"count": 2})
    assert not caught.value.retriable
    found = store.get(TOPOLOGY)
    assert found is not None
    assert found[0].request_id == first.request_id  # nothing changed
    store.update(TOPOLOGY, first, state=DONE)
    assert store.request(TOPOLOGY, {"count": 2}).targets == {"count": 2}


def test_an_open_request_without_a_live_run_is_stale(store: ZkRebalanceStore) -> None:
    store.request(TOPOLOGY, {"count": 4})
    assert store.live(TOPOLOGY) is None
    assert store.request(TOPOLOGY, {"count": 2}).targets == {"count": 2}


def test_the_live_record_is_ephemeral(
    store: ZkRebalanceStore, zk_connect: Callable[..., ZkSession]
) -> None:
    other = zk_connect()
    ZkRebalanceStore(other).publish_live(TOPOLOGY, {"pid": 7})
    ZkRebalanceStore(other).publish_live(TOPOLOGY, {"pid": 8})
    assert store.live(TOPOLOGY) == {"pid": 8}
    other.close()
    assert store.live(TOPOLOGY) is None


def test_a_watch_sees_each_new_request(store: ZkRebalanceStore) -> None:
    seen: list[RebalanceRequest | None] = []
    changed = threading.Event()

    def watch(request: RebalanceRequest | None) -> None:
        seen.append(request)
        changed.set()

    store.watch(TOPOLOGY, watch)
    assert changed.wait(10)
    changed.clear()
    made = store.request(TOPOLOGY, {"count": 3})
    assert changed.wait(10)
    assert seen[0] is None
    assert seen[-1] == made


def test_a_live_watch_sees_the_run_go_when_its_session_ends(
    store: ZkRebalanceStore, zk_connect: Callable[..., ZkSession]
) -> None:
    run = zk_connect()
    ZkRebalanceStore(run).publish_live(TOPOLOGY, {"pid": 7})
    seen: list[bool] = []
    gone = threading.Event()

    def watch(exists: bool) -> None:
        seen.append(exists)
        if not exists:
            gone.set()

    store.watch_live(TOPOLOGY, watch)
    run.close()  # as a killed run's session ends
    assert gone.wait(10)
    assert seen[0] is True
    assert seen[-1] is False
