"""ZkElection: one leader among contenders, take-over when it dies, re-entry."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sr3.errors import CoordinationError
from sr3.ports import Election
from zk.client import ZkSession
from zk.election import ElectionState, ZkElection

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]


class Changes:
    """Records on_change calls from the election thread."""

    def __init__(self) -> None:
        self.values: list[bool] = []
        self._lock = threading.Lock()

    def __call__(self, leading: bool) -> None:
        with self._lock:
            self.values.append(leading)

    def snapshot(self) -> list[bool]:
        with self._lock:
            return list(self.values)


@pytest.fixture
def elections() -> Iterator[list[ZkElection]]:
    """Collects elections to stop at teardown."""
    started: list[ZkElection] = []
    yield started
    for election in started:
        election.stop()


def _start(
    elections: list[ZkElection], session: ZkSession, name: str, **kwargs: Any
) -> ZkElection:
    election = ZkElection(session, name, **kwargs)
    elections.append(election)
    election.start()
    return election


def test_first_contender_leads(
    zk_connect: Callable[..., ZkSession], elections: list[ZkElection], wait_until: Any
) -> None:
    changes = Changes()
    a = _start(elections, zk_connect(), "a", on_change=changes)
    b = _start(elections, zk_connect(), "b")
    port: Election = a
    assert port.is_leader()
    assert a.state is ElectionState.RUNNING
    assert not b.is_leader()
    assert a.leader() == b.leader() == "a"
    assert changes.snapshot() == [True]


def test_other_takes_over_when_the_leader_session_closes(
    zk_connect: Callable[..., ZkSession], elections: list[ZkElection], wait_until: Any
) -> None:
    sa = zk_connect()
    a = _start(elections, sa, "a")
    changes = Changes()
    b = _start(elections, zk_connect(), "b", on_change=changes)
    c = _start(elections, zk_connect(), "c")
    sa.close()
    wait_until(b.is_leader, what="b to take over")
    assert not c.is_leader()
    assert b.leader() == "b"
    assert changes.snapshot() == [True]
    assert not a.is_leader()


def test_leader_session_expiry_hands_over_and_leader_reenters(
    zk_connect: Callable[..., ZkSession],
    elections: list[ZkElection],
    expire_session: Callable[[ZkSession], int],
    wait_until: Any,
) -> None:
    sa = zk_connect()
    a_changes = Changes()
    a = _start(elections, sa, "a", on_change=a_changes)
    b = _start(elections, zk_connect(), "b")
    new_sid = expire_session(sa)
    wait_until(b.is_leader, what="b to take over after a's session expired")
    assert not a.is_leader()

    def a_back_in() -> bool:
        contenders = sa.client.get_children(sa.paths.election)
        owners = [
            sa.client.exists(f"{sa.paths.election}/{c}").ephemeralOwner
            for c in contenders
        ]
        return len(contenders) == 2 and new_sid in owners

    wait_until(a_back_in, what="a to re-enter with its new session")
    assert a.leader() == "b"
    assert not a.is_leader()
    wait_until(lambda: a_changes.snapshot() == [True, False], what="a's loss")


def test_stop_hands_over_and_is_final(
    zk_connect: Callable[..., ZkSession], elections: list[ZkElection], wait_until: Any
) -> None:
    changes = Changes()
    a = _start(elections, zk_connect(), "a", on_change=changes)
    b = _start(elections, zk_connect(), "b")
    a.stop()
    assert not a.is_leader()
    assert changes.snapshot() == [True, False]
    wait_until(b.is_leader, what="b to lead after a stopped")
    a.stop()  # idempotent
    with pytest.raises(CoordinationError, match="cannot go from STOPPED"):
        a.start()
    with pytest.raises(CoordinationError, match="cannot go from RUNNING"):
        b.start()


def test_stale_contender_of_a_previous_process_is_replaced(
    zk_connect: Callable[..., ZkSession], elections: list[ZkElection], wait_until: Any
) -> None:
    # A crashed process of "a" left its contender behind (session not expired).
    old = zk_connect(session_timeout_s=10.0)
    old.client.ensure_path(old.paths.election)
    old.client.create(old.paths.contender(), b"a", ephemeral=True, sequence=True)
    b = _start(elections, zk_connect(), "b")
    assert not b.is_leader()
    a = _start(elections, zk_connect(), "a")
    assert a.leader() == "b"  # a's stale znode went; a re-entered behind b
    assert not a.is_leader()
    wait_until(b.is_leader, what="b to lead once the stale znode went")


def test_nobody_leads_an_empty_election(zk_session: ZkSession) -> None:
    election = ZkElection(zk_session, "solo")
    assert election.leader() is None
    assert not election.is_leader()
    election.stop()  # from NEW
    assert election.state is ElectionState.STOPPED


def test_leader_is_not_leader_while_zookeeper_is_down(
    zk_connect: Callable[..., ZkSession],
    elections: list[ZkElection],
    zk_restart: Callable[..., None],
    wait_until: Any,
) -> None:
    # 10 s session timeout outlives the 1 s outage, so leadership resumes.
    a = _start(elections, zk_connect(session_timeout_s=10.0), "a")
    assert a.is_leader()
    down: list[bool] = []
    zk_restart(
        1.0, while_down=lambda: down.append(wait_until(lambda: not a.is_leader()))
    )
    assert down == [True]
    # A reconnect attempt that reaches the server while it is still starting can
    # wait one session timeout for an answer (kazoo's connect timeout); after
    # that the session resumes or, expired, the election re-enters on a new one.
    wait_until(a.is_leader, timeout_s=35.0, what="a to lead again after the outage")
