"""EmbeddedZooKeeper starts Debian's ZooKeeper, is ready when a session opens, stops."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sr3.errors import CoordinationError, ZooKeeperMissingError
from zk.launcher import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]


def _serves(hosts: str) -> bool:
    client = KazooClient(hosts=hosts)
    client.start(timeout=5)
    try:
        return client.exists("/") is not None
    finally:
        client.stop()
        client.close()


def test_start_restart_keeps_port_and_data(
    tmp_path: Path, zk_server: EmbeddedZooKeeper
) -> None:
    with EmbeddedZooKeeper(tmp_path) as server:
        port, first_pid = server.port, server.pid
        assert server.is_running()
        assert server.hosts == f"127.0.0.1:{port}"
        assert _serves(server.hosts)
        cfg = server.config_path.read_text()
        assert "clientPortAddress=127.0.0.1" in cfg
        assert "minSessionTimeout=400" in cfg
        assert "admin.enableServer=false" in cfg
        client = KazooClient(hosts=server.hosts)
        client.start(timeout=5)
        client.create("/kept", b"x")
        client.stop()
        client.close()

        server.stop()
        assert not server.is_running()
        assert server.pid is None
        server.start()
        assert server.port == port
        assert server.pid != first_pid
        client = KazooClient(hosts=server.hosts)
        client.start(timeout=5)
        assert client.get("/kept")[0] == b"x"
        client.stop()
        client.close()
    assert not server.is_running()
    assert server.log_path.stat().st_size > 0


def test_hosts_before_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CoordinationError, match="start"):
        _ = EmbeddedZooKeeper(tmp_path).hosts


def test_missing_jar(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jar"
    with pytest.raises(
        ZooKeeperMissingError, match="apt-get install zookeeper"
    ) as info:
        EmbeddedZooKeeper(tmp_path, jar=missing).start()
    assert str(missing) in str(info.value)
    assert "make setup" in str(info.value)
    assert info.value.retriable is False


def test_missing_java(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperMissingError, match="java /no/such/java"):
        EmbeddedZooKeeper(tmp_path, java="/no/such/java").start()


def test_port_in_use_is_refused(tmp_path: Path, zk_server: EmbeddedZooKeeper) -> None:
    clash = EmbeddedZooKeeper(tmp_path, port=zk_server.port)
    with pytest.raises(CoordinationError, match="is in use"):
        clash.start()
    assert not clash.is_running()


def test_early_death_reports_the_log_tail(tmp_path: Path) -> None:
    fake_jar = tmp_path / "fake.jar"
    fake_jar.write_bytes(b"not a jar")
    server = EmbeddedZooKeeper(tmp_path, jar=fake_jar)
    with pytest.raises(CoordinationError, match="exited with code 1") as info:
        server.start()
    assert "ZooKeeperServerMain" in str(info.value)  # java's complaint, from the log
    assert not server.is_running()


def test_detached_server_outlives_its_object(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path, detached=True)
    server.start()
    try:
        pid = server.pid
        assert pid is not None
        assert (tmp_path / "zookeeper.pid").read_text().strip() == str(pid)
        assert EmbeddedZooKeeper.detached_pid(tmp_path) == pid
        assert EmbeddedZooKeeper.detached_hosts(tmp_path) == server.hosts
        with pytest.raises(CoordinationError, match="already runs"):
            EmbeddedZooKeeper(tmp_path).start()

        assert EmbeddedZooKeeper.stop_detached(tmp_path) is True
        assert EmbeddedZooKeeper.detached_pid(tmp_path) is None
        assert not (tmp_path / "zookeeper.pid").exists()
        assert EmbeddedZooKeeper.stop_detached(tmp_path) is False
    finally:
        server.stop()  # reaps the child; a no-op signal-wise if already stopped


def test_stale_pid_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "zookeeper.pid").write_text("1\n")  # pid 1 is not our ZooKeeper
    assert EmbeddedZooKeeper.detached_pid(tmp_path) is None
    assert EmbeddedZooKeeper.stop_detached(tmp_path) is False
