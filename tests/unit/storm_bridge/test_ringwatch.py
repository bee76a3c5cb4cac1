"""RingWatch: a killed node is awaited until its registration left, rejoins included.

The membership here is the in-memory kind the ports describe for unit tests; it
calls the watch back synchronously, like the first call of ``ZkMembership``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import pytest

from sr3.errors import CoordinationError
from sr3.ports import MembersCallback, NodeInfo
from storm_bridge.ringwatch import RingWatch

TIMEOUT_S = 10.0


class MemoryMembership:
    """Registrations in a dict; every change calls the watches back at once."""

    def __init__(self, *nodes: NodeInfo) -> None:
        self.live = {n.node_id: n for n in nodes}
        self.watches: list[MembersCallback] = []

    def register(self, info: NodeInfo) -> None:
        self.live[info.node_id] = info

    def unregister(self, node_id: str) -> None:
        self.live.pop(node_id, None)

    def members(self) -> dict[str, NodeInfo]:
        return dict(self.live)

    def watch(self, callback: MembersCallback) -> None:
        self.watches.append(callback)
        callback(self.members())

    def report(self, members: Mapping[str, NodeInfo]) -> None:
        """Deliver ``members`` as one watch call (the changes before it coalesced)."""
        self.live = dict(members)
        for callback in self.watches:
            callback(self.members())


def eventually(check: Callable[[], bool]) -> bool:
    """Poll ``check`` (departures are handled on threads of their own)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # departures run on threads: poll, bounded by TIMEOUT_S
    return True


def node(node_id: str, incarnation: int | None) -> NodeInfo:
    return NodeInfo(node_id, "127.0.0.1", 7000, incarnation=incarnation)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def started(membership: MemoryMembership) -> tuple[RingWatch, list[str], Clock]:
    left: list[str] = []
    lock = threading.Lock()

    def on_left(node_id: str) -> None:
        with lock:
            left.append(node_id)

    clock = Clock()
    watch = RingWatch(membership, on_left, clock, lambda: True)
    watch.start()
    return watch, left, clock


def test_a_rejoin_in_one_call_is_a_departure_and_releases_the_kill() -> None:
    ring = MemoryMembership(node("n1", 1), node("n2", 2))
    watch, left, _ = started(ring)
    watch.killing("n2")
    assert not watch.wait_handled(deadline=0.0)
    ring.report({"n1": node("n1", 1), "n2": node("n2", 9)})  # same ids
    assert watch.wait_handled(deadline=1e9)
    assert left == ["n2"]
    assert watch.reason(started=0.0) is None


def test_a_killed_node_still_registered_is_named_with_its_kill_time() -> None:
    ring = MemoryMembership(node("n1", 1), node("n2", 0x2A))
    watch, left, clock = started(ring)
    clock.now = 102.0
    watch.killing("n2")
    ring.report(ring.members())  # a reconnect: nothing changed
    assert left == []
    assert watch.reason(started=100.0) == (
        "waiting for ring node n2 to leave the ring: its ZooKeeper session has "
        "not ended (the node was killed at 2.0 s; its registration 0x2a is still "
        "in the ring)"
    )


def test_a_departure_of_an_older_registration_keeps_the_kill_pending() -> None:
    ring = MemoryMembership(node("n1", 1))
    watch, left, _ = started(ring)
    ring.live["n2"] = node("n2", 5)  # registered; the watch has not said so yet
    watch.killing("n2")  # read from the membership: registration 5 is awaited
    # the watch catches up late: an older registration, then the killed one
    ring.report({"n1": node("n1", 1), "n2": node("n2", 3)})
    ring.report({"n1": node("n1", 1), "n2": node("n2", 5)})
    assert not watch.wait_handled(deadline=0.0)
    assert "waiting for ring node n2 to leave" in (watch.reason(0.0) or "")
    ring.report({"n1": node("n1", 1)})
    assert watch.wait_handled(deadline=1e9)
    assert eventually(lambda: left == ["n2", "n2"])  # registration 3, then 5


def test_a_replacement_seen_without_its_departure_releases_the_kill() -> None:
    ring = MemoryMembership(node("n1", 1))
    watch, left, _ = started(ring)
    ring.live["n2"] = node("n2", 5)
    watch.killing("n2")
    # registration 5 came and went unseen; a restarted process registered 8
    ring.report({"n1": node("n1", 1), "n2": node("n2", 8)})
    assert watch.wait_handled(deadline=1e9)
    assert left == ["n2"]


def test_a_node_not_in_the_ring_is_not_awaited() -> None:
    watch, left, _ = started(MemoryMembership(node("n1", 1)))
    watch.killing("n9")
    assert watch.wait_handled(deadline=0.0)
    assert left == []


class FlakyMembership(MemoryMembership):
    """Refuses the first ``failures`` watches, as a restarting ZooKeeper does."""

    def __init__(self, failures: int, *nodes: NodeInfo) -> None:
        super().__init__(*nodes)
        self.failures = failures

    def watch(self, callback: MembersCallback) -> None:
        if self.failures > 0:
            self.failures -= 1
            msg = "watch members: ZooKeeper session expired"
            raise CoordinationError(msg)
        super().watch(callback)


def test_start_waits_out_a_zookeeper_restart() -> None:
    membership = FlakyMembership(2, node("node-1", 1))
    watch = RingWatch(membership, lambda _n: None, time.monotonic, lambda: True)

    watch.start(pause_s=0.01)

    assert membership.failures == 0
    assert len(membership.watches) == 1


def test_start_gives_up_after_its_wait() -> None:
    membership = FlakyMembership(1_000, node("node-1", 1))
    watch = RingWatch(membership, lambda _n: None, time.monotonic, lambda: True)

    with pytest.raises(CoordinationError, match="session expired"):
        watch.start(wait_s=0.05, pause_s=0.01)
    assert membership.watches == []
