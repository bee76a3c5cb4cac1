"""ZkMembership: ephemeral member znodes, watches, and surviving session trouble."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from sr3 import ports
from sr3.codec import pack_meta
from sr3.config import ZkConfig
from sr3.ports import Membership, NodeInfo
from zk.client import ZkSession
from zk.membership import ZkMembership

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

N1 = NodeInfo("n1", "10.0.0.1", 7001, zone="a")
N2 = NodeInfo("n2", "10.0.0.2", 7002, zone="b", capacity=2)

# Holds a member znode until SIGKILLed; its session times out after 1 s.
_VICTIM = """
import sys, threading
from sr3.config import ZkConfig
from sr3.ports import NodeInfo
from zk.client import connect
from zk.membership import ZkMembership
hosts, chroot = sys.argv[1], sys.argv[2]
session = connect(ZkConfig(hosts=hosts, chroot=chroot, session_timeout_s=1.0))
ZkMembership(session).register(NodeInfo("victim", "127.0.0.1", 9))
threading.Event().wait()
"""


class Recorder:
    """Collects watch callbacks from kazoo's thread."""

    def __init__(self) -> None:
        self.calls: list[dict[str, NodeInfo]] = []
        self._lock = threading.Lock()

    def __call__(self, members: Mapping[str, NodeInfo]) -> None:
        with self._lock:
            self.calls.append(dict(members))

    def last(self) -> dict[str, NodeInfo] | None:
        with self._lock:
            return self.calls[-1] if self.calls else None


def test_implements_the_port(zk_session: ZkSession) -> None:
    membership: Membership = ZkMembership(zk_session)
    assert membership.members() == {}


def test_register_list_unregister(zk_session: ZkSession) -> None:
    membership = ZkMembership(zk_session)
    membership.register(N1)
    membership.register(N2)
    assert membership.members() == {"n1": N1, "n2": N2}
    stat = zk_session.client.exists(zk_session.paths.member("n1"))
    assert stat.ephemeralOwner == zk_session.session_id

    membership.register(N1)  # idempotent
    moved = NodeInfo("n1", "10.0.0.9", 7009, zone="a")
    membership.register(moved)  # new data replaces the old announcement
    assert membership.members()["n1"] == moved

    membership.unregister("n1")
    membership.unregister("n1")  # no error if already gone
    assert membership.members() == {"n2": N2}


def test_members_disappear_when_the_session_closes(
    zk_connect: Callable[..., ZkSession], wait_until: Any
) -> None:
    observer = ZkMembership(zk_connect())
    node_session = zk_connect()
    ZkMembership(node_session).register(N1)
    assert set(observer.members()) == {"n1"}
    node_session.close()
    wait_until(lambda: observer.members() == {}, what="n1 to leave")


def test_unreadable_member_is_skipped(zk_session: ZkSession) -> None:
    membership = ZkMembership(zk_session)
    membership.register(N1)
    zk_session.client.create(zk_session.paths.member("junk"), b"\x09garbage")
    zk_session.client.create(zk_session.paths.member("half"), pack_meta({"host": "x"}))
    assert membership.members() == {"n1": N1}


def test_watch_reports_now_and_on_every_change(
    zk_connect: Callable[..., ZkSession], wait_until: Any
) -> None:
    observer = ZkMembership(zk_connect())
    recorder = Recorder()
    observer.watch(recorder)
    assert recorder.calls == [{}]  # the first call happens in watch() itself

    s1, s2 = zk_connect(), zk_connect()
    ZkMembership(s1).register(N1)
    wait_until(lambda: recorder.last() == {"n1": N1}, what="n1 in the watch")
    ZkMembership(s2).register(N2)
    wait_until(lambda: recorder.last() == {"n1": N1, "n2": N2}, what="n2 in the watch")
    s1.close()
    wait_until(lambda: recorder.last() == {"n2": N2}, what="n1 out of the watch")

    observer.close()
    count = len(recorder.calls)
    ZkMembership(zk_connect()).register(N1)
    ZkMembership(zk_connect()).register(NodeInfo("n3", "h", 1))
    # A closed membership's watch drops on its next event without calling back.
    assert len(recorder.calls) == count


def test_failing_callback_keeps_the_watch(
    zk_connect: Callable[..., ZkSession], wait_until: Any
) -> None:
    recorder = Recorder()

    def flaky(members: Mapping[str, NodeInfo]) -> None:
        recorder(members)
        msg = "callback bug"
        raise RuntimeError(msg)

    ZkMembership(zk_connect()).watch(flaky)
    ZkMembership(zk_connect()).register(N1)
    wait_until(lambda: recorder.last() == {"n1": N1}, what="the watch to go on")


def test_restart_within_session_timeout_replaces_the_old_znode(
    zk_connect: Callable[..., ZkSession],
) -> None:
    # The old process's session still lives (as after a crash shorter than the
    # session timeout); the new process must take the node id over at once.
    old = zk_connect(session_timeout_s=10.0)
    ZkMembership(old).register(N1)
    new = zk_connect()
    restarted = NodeInfo("n1", "10.0.0.1", 7555)
    membership = ZkMembership(new)
    membership.register(restarted)
    stat = new.client.exists(new.paths.member("n1"))
    assert stat.ephemeralOwner == new.session_id
    assert membership.members() == {"n1": restarted}


def test_sigkilled_holder_disappears_within_seconds(
    zk_config: ZkConfig, zk_session: ZkSession, wait_until: Any
) -> None:
    membership = ZkMembership(zk_session)
    victim = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, zk_config.hosts, zk_config.chroot],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: "victim" in membership.members() or victim.poll() is not None,
            what="the victim to register",
        )
        assert victim.poll() is None, victim.stderr.read() if victim.stderr else ""
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_until(
            lambda: "victim" not in membership.members(),
            timeout_s=5.0,
            what="the killed victim's znode to expire",
        )
        # 1 s session timeout, checked on 200 ms ticks: gone in about 1.2 s.
        assert time.monotonic() - killed < 4.0
    finally:
        victim.kill()
        victim.wait()
        if victim.stderr:
            victim.stderr.close()


def test_reregisters_after_session_expiry(
    zk_session: ZkSession,
    expire_session: Callable[[ZkSession], int],
    wait_until: Any,
) -> None:
    membership = ZkMembership(zk_session)
    membership.register(N1)
    recorder = Recorder()
    membership.watch(recorder)
    new_sid = expire_session(zk_session)

    def owned_by_new_session() -> bool:
        stat = zk_session.client.exists(zk_session.paths.member("n1"))
        return stat is not None and stat.ephemeralOwner == new_sid

    wait_until(owned_by_new_session, what="n1 to be re-registered")
    assert membership.members() == {"n1": N1}
    wait_until(lambda: recorder.last() == {"n1": N1}, what="the watch to resume")


@pytest.mark.slow
def test_member_survives_a_zookeeper_restart(
    zk_connect: Callable[..., ZkSession],
    zk_restart: Callable[..., None],
    wait_until: Any,
) -> None:
    # The session outlives an outage shorter than its timeout: ZooKeeper keeps
    # sessions in its data dir, and the client reconnects (every 0.5 s at most)
    # with the same session id. 20 s timeout > 5 s outage + restart + reconnect,
    # including an attempt that reached the server while it was starting and waited
    # for an answer (kazoo gives it a session timeout over the host count).
    session = zk_connect(session_timeout_s=20.0)
    membership = ZkMembership(session)
    membership.register(N1)
    sid = session.session_id

    zk_restart(5.0, while_down=lambda: wait_until(lambda: not session.connected))

    wait_until(
        lambda: session.connected, timeout_s=35.0, what="the client to reconnect"
    )
    assert session.session_id == sid
    stat = session.client.exists(session.paths.member("n1"))
    assert stat is not None
    assert stat.ephemeralOwner == sid
    assert membership.members() == {"n1": N1}


def test_a_node_replaced_between_two_deliveries_is_seen_leaving(
    zk_connect: Callable[..., ZkSession], wait_until: Any
) -> None:
    # A node killed and restarted before its old session ended deletes its old
    # member znode and creates its own (issue 21, bug 3). The observer's kazoo
    # callback thread is held busy meanwhile (a gate watch of the same session
    # blocks it), as a loaded one is in a real run: the watch then fires once,
    # after both changes, with the same ids. Its delivery must still tell that
    # n1 left and came back.
    observer_session = zk_connect()
    observer = ZkMembership(observer_session)
    recorder = Recorder()
    observer.watch(recorder)
    old = zk_connect(session_timeout_s=10.0)  # the killed process's session
    ZkMembership(old).register(N1)
    wait_until(lambda: recorder.last() == {"n1": N1}, what="n1 in the watch")
    before = recorder.calls[-1]["n1"]

    gate = observer_session.paths.members + "-gate"
    client = observer_session.client
    client.ensure_path(gate)
    holding, release = threading.Event(), threading.Event()

    def hold(_data: bytes | None, _stat: Any) -> None:
        if _stat is not None and _stat.version > 0:
            holding.set()
            release.wait(30)

    client.DataWatch(gate, hold)
    delivered = len(recorder.calls)
    try:
        zk_connect().client.set(gate, b"hold")
        wait_until(holding.is_set, what="the observer's callback thread to be held")
        restarted = ZkMembership(zk_connect())  # the restarted process
        restarted.register(N1)
    finally:
        release.set()
    # its first call after the hold reads the listing after both changes
    wait_until(lambda: len(recorder.calls) > delivered, what="the watch to fire")
    after = recorder.calls[delivered]["n1"]
    assert after == before  # same record: only its registration tells them apart
    assert getattr(after, "incarnation", None) is not None, (
        "the watch delivered n1 unchanged: its leave and rejoin went unseen"
    )
    assert after.incarnation != before.incarnation
    assert not after.same_registration(before)
    change = ports.MembershipChange.between({"n1": before}, recorder.calls[delivered])
    assert change.left == (before,)
    assert change.joined == (after,)
    assert change.rejoined == ("n1",)


class _Records(logging.Handler):
    """Keeps the records of the loggers it is added to; flags an expiry's."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.exc_info or "expired" in record.getMessage():
            self.seen.set()


def test_a_change_read_as_the_session_expires_is_read_on_the_next_one(
    zk_connect: Callable[..., ZkSession],
    expire_server_side: Callable[[ZkSession], int],
    wait_until: Any,
) -> None:
    # In a CI run, a `sr3 -v snapshot put` printed kazoo's traceback
    # ("Exception in worker queue thread", SessionExpiredError): a member
    # change was read as the command's session expired under load. The
    # observer's callback thread is held (a gate watch) while a member
    # registers, the session is expired, and the hold ends while the client
    # is in the expired state (a state listener runs on the connection thread
    # before it reconnects): the change's read then meets the expiry.
    observer_session = zk_connect()
    observer = ZkMembership(observer_session)
    recorder = Recorder()
    observer.watch(recorder)
    ZkMembership(zk_connect(session_timeout_s=10.0)).register(N1)
    wait_until(lambda: recorder.last() == {"n1": N1}, what="n1 in the watch")

    client = observer_session.client
    gate = observer_session.paths.members + "-gate"
    client.ensure_path(gate)
    holding, release = threading.Event(), threading.Event()

    def hold(_data: bytes | None, stat: Any) -> None:
        if stat is not None and stat.version > 0 and not release.is_set():
            holding.set()
            release.wait(30)

    client.DataWatch(gate, hold)
    records = _Records()
    loggers = [logging.getLogger(name) for name in ("kazoo.handlers", "zk")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.addHandler(records)
        log.setLevel(logging.INFO)

    def on_state(state: str) -> None:
        if state == "LOST" and not release.is_set():
            release.set()  # the held change is read now, in the expired state
            records.seen.wait(5)

    client.add_listener(on_state)
    try:
        zk_connect().client.set(gate, b"hold")
        wait_until(holding.is_set, what="the observer's callback thread to be held")
        ZkMembership(zk_connect(session_timeout_s=10.0)).register(N2)
        client.exists(gate)  # the change's event is queued before this answer
        expire_server_side(observer_session)
        wait_until(release.is_set, timeout_s=15.0, what="the expiry to be seen")
        wait_until(
            lambda: recorder.last() == {"n1": N1, "n2": N2},
            what="the watch to read the change on the new session",
        )
    finally:
        release.set()
        client.remove_listener(on_state)
        for log, level in zip(loggers, levels, strict=True):
            log.removeHandler(records)
            log.setLevel(level)
    tracebacks = [r.getMessage() for r in records.records if r.exc_info]
    assert tracebacks == [], "an expiry during a watch's read logged a traceback"
    assert any("expired" in r.getMessage() for r in records.records), [
        r.getMessage() for r in records.records
    ]
