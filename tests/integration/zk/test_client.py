"""connect() opens a chrooted, reconnecting session; translate() maps kazoo errors."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from sr3.config import ZkConfig
from sr3.errors import ConfigError, CoordinationError, SessionLostError
from zk.client import SessionState, ZkSession, connect
from zk.launcher import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]


def test_connect_creates_a_nested_chroot(
    zk_server: EmbeddedZooKeeper, zk_config: ZkConfig
) -> None:
    chroot = f"{zk_config.chroot}/cluster/a"
    with connect(ZkConfig(hosts=zk_server.hosts, chroot=chroot)) as session:
        assert session.connected
        assert session.state is SessionState.CONNECTED
        assert session.session_id
        assert session.paths.chroot == chroot
        session.client.create("/probe", b"1")
    raw = KazooClient(hosts=zk_server.hosts)
    raw.start(timeout=5)
    try:
        assert raw.get(f"{chroot}/probe")[0] == b"1"
    finally:
        raw.stop()
        raw.close()


def test_hosts_argument_overrides_config(zk_server: EmbeddedZooKeeper) -> None:
    with connect(ZkConfig(chroot="/override"), hosts=zk_server.hosts) as session:
        assert session.hosts == zk_server.hosts


def test_empty_hosts_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.zk\.hosts"):
        connect(ZkConfig(hosts=""))


def test_unreachable_server_times_out() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = ZkConfig(hosts=f"127.0.0.1:{port}", connect_timeout_s=0.5)
    with pytest.raises(CoordinationError, match="no ZooKeeper session") as info:
        connect(config)
    assert info.value.retriable is True


def test_translate_names_the_znode(zk_session: ZkSession) -> None:
    chroot = zk_session.config.chroot
    with pytest.raises(
        CoordinationError, match=f"znode {chroot}/missing does not"
    ) as info:
        with zk_session.translate("read thing", "/missing"):
            zk_session.client.get("/missing")
    assert info.value.retriable is False
    assert info.value.__cause__ is not None

    zk_session.client.create("/here", b"")
    with pytest.raises(CoordinationError, match="exists already"):
        with zk_session.translate("create thing", "/here"):
            zk_session.client.create("/here", b"")
    with pytest.raises(CoordinationError, match="changed concurrently") as info:
        with zk_session.translate("update thing", "/here"):
            zk_session.client.set("/here", b"x", version=7)
    assert info.value.retriable is True


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (SessionExpiredError(), SessionLostError, "session expired"),
        (ConnectionLoss(), CoordinationError, "unreachable"),
    ],
)
def test_translate_session_and_connection_errors(
    zk_session: ZkSession, exc: Exception, kind: type[Exception], text: str
) -> None:
    with pytest.raises(kind, match=text) as info:
        with zk_session.translate("do thing", "/x"):
            raise exc
    assert isinstance(info.value, CoordinationError)
    assert info.value.retriable is True
    assert info.value.__cause__ is exc


def test_call_bounds_and_returns(zk_session: ZkSession) -> None:
    client = zk_session.client
    zk_session.call(lambda: client.create_async("/a", b"v"), retry=False)
    assert zk_session.call(lambda: client.get_async("/a"))[0] == b"v"
    assert zk_session.get_many(["/a", "/gone"]).keys() == {"/a"}


def test_a_call_across_expiry_is_made_again_in_the_new_session(
    zk_session: ZkSession,
) -> None:
    client = zk_session.client
    client.create("/report", b"v")
    attempts: list[int] = []

    def get_expiring_once() -> Any:
        attempts.append(1)
        if len(attempts) == 1:  # what kazoo answers when the session expired
            result = client.handler.async_result()
            result.set_exception(SessionExpiredError())
            return result
        return client.get_async("/report")

    assert zk_session.call(get_expiring_once, across_expiry=True)[0] == b"v"
    assert len(attempts) == 2
    # by default an expiry ends the call: the caller may hold ephemeral znodes
    attempts.clear()
    with pytest.raises(SessionExpiredError):
        zk_session.call(get_expiring_once)
    assert len(attempts) == 1


def test_digest_acl_locks_out_other_users(
    zk_connect: Callable[..., ZkSession], zk_server: EmbeddedZooKeeper
) -> None:
    owner = zk_connect(digest="alice:secret")
    owner.client.create("/private", b"s3cret")
    assert owner.client.get("/private")[0] == b"s3cret"

    stranger = zk_connect(digest="mallory:guess")
    with pytest.raises(CoordinationError, match=r"sr3\.zk\.digest") as info:
        with stranger.translate("read private", "/private"):
            stranger.client.get("/private")
    assert info.value.retriable is False


def test_listeners_see_expiry_and_the_new_session(
    zk_session: ZkSession, expire_session: Callable[[ZkSession], int]
) -> None:
    seen: list[SessionState] = []
    lock = threading.Lock()

    def listener(state: SessionState) -> None:
        with lock:
            seen.append(state)

    zk_session.add_listener(listener)
    old = zk_session.session_id
    new = expire_session(zk_session)
    assert new != old
    with lock:
        assert SessionState.LOST in seen
        assert seen[-1] is SessionState.CONNECTED
    zk_session.remove_listener(listener)
    zk_session.remove_listener(listener)  # no error the second time


def test_a_request_after_a_restart_is_answered_though_the_first_reconnect_hung(
    tmp_path: Path,
) -> None:
    # A ZooKeeper that is starting accepts connections it never answers (3.8.0:
    # a client that reconnected 0.3 s before the server served waited its whole
    # 30 s session for the reply; the run's next request failed as
    # "unreachable" and the session expired). A socket that accepts the
    # client's reconnect and stays silent stands in for that moment; then the
    # real server starts on the port.
    server = EmbeddedZooKeeper(tmp_path / "zk")
    server.start()
    config = ZkConfig(
        hosts=server.hosts, session_timeout_s=30.0, connect_timeout_s=10.0
    )
    try:
        with connect(config) as session:
            sid = session.session_id
            session.client.create("/mine", b"", ephemeral=True)
            server.stop()
            with socket.create_server(("127.0.0.1", server.port)) as silent:
                silent.settimeout(10.0)
                hung, _ = silent.accept()  # the client's reconnect: never answered
            with hung:
                server.start()
                # one request waits connect_timeout_s (10 s) for its reply
                assert session.children("/") == ["mine"]
            assert session.session_id == sid
    finally:
        server.stop()
