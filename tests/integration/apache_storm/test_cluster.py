"""A real Apache Storm cluster from Maven jars: readiness, status, kills, errors."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storm_bridge.apache import (
    ApacheStormCluster,
    StormClusterError,
    StormHome,
    StormMissingError,
)

pytestmark = [pytest.mark.zk, pytest.mark.apache_storm, pytest.mark.slow]


def _processes_under(root: Path) -> list[int]:
    """Pids whose argv or working dir names a path under ``root``."""
    prefix = f"{root}/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            cwd = str(Path(entry / "cwd").readlink())
        except OSError:
            continue
        if prefix in argv or f"{cwd}/".startswith(prefix):
            found.append(int(entry.name))
    return found


def test_the_cluster_reports_its_supervisor_and_slots(
    apache_storm: ApacheStormCluster,
) -> None:
    status = apache_storm.status()
    assert status["error"] is None
    assert status["leader"] is True
    assert status["nimbus"] == apache_storm.nimbus
    assert status["nimbus_pid"] is not None
    assert status["version"] == apache_storm.info.version
    (supervisor,) = status["supervisors"]
    assert supervisor["slots"] == 2
    assert supervisor["used_slots"] + supervisor["free_slots"] == 2
    (process,) = status["supervisor_processes"]
    assert process["pid"] is not None
    assert len(process["slots"]) == 2
    assert status["ui"] is None
    assert "storm-webapp" in status["ui_note"]


def test_a_killed_supervisor_is_seen_gone_and_a_restart_brings_it_back(
    apache_storm: ApacheStormCluster,
) -> None:
    before = apache_storm.wait_supervisors(1).supervisors[0].supervisor_id
    killed = apache_storm.kill_supervisor(1)
    assert killed is not None
    try:
        # its ZooKeeper session expires, so Nimbus stops listing it
        apache_storm.wait_supervisors(0, timeout_s=60)
        assert apache_storm.status()["supervisor_processes"][0]["pid"] is None
    finally:
        pid = apache_storm.restart_supervisor(1)
    assert pid != killed
    after = apache_storm.wait_supervisors(1).supervisors[0]
    assert after.supervisor_id == before  # same local dir, same id and slots
    assert after.slots == 2


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_taken_nimbus_port_is_refused_naming_it_and_the_fix(
    storm_cluster_factory: Callable[..., ApacheStormCluster], taken_port: int
) -> None:
    cluster = storm_cluster_factory(nimbus_port=taken_port)
    with pytest.raises(StormClusterError) as caught:
        cluster.start()
    message = str(caught.value)
    assert f"127.0.0.1:{taken_port}" in message
    assert "--nimbus-port" in message
    assert _processes_under(cluster.root) == []


def test_a_java_home_without_java_is_refused_naming_it(
    storm_cluster_factory: Callable[..., ApacheStormCluster], tmp_path: Path
) -> None:
    cluster = storm_cluster_factory(java_home=str(tmp_path / "no-jdk"), nimbus_port=0)
    with pytest.raises(StormMissingError) as caught:
        cluster.start()
    assert f"JAVA_HOME={tmp_path / 'no-jdk'}" in str(caught.value)
    assert "openjdk-17" in str(caught.value)
    assert _processes_under(cluster.root) == []


def test_unfetched_jars_are_named_with_the_command_that_fetches_them(
    tmp_path: Path,
) -> None:
    with pytest.raises(StormMissingError) as caught:
        StormHome.locate(cache_dir=tmp_path)
    message = str(caught.value)
    assert "storm-server-" in message
    assert "scripts/fetch-jars.sh" in message


def test_a_daemon_that_dies_at_start_is_reported_with_its_output(
    storm_cluster_factory: Callable[..., ApacheStormCluster],
) -> None:
    # Storm validates its conf at start and exits on a value of the wrong type
    cluster = storm_cluster_factory(
        nimbus_port=0, conf={"nimbus.thrift.max_buffer_size": "not a number"}
    )
    with pytest.raises(StormClusterError) as caught:
        cluster.start()
    message = str(caught.value)
    assert "exited with code" in message
    assert "NIMBUS_THRIFT_MAX_BUFFER_SIZE must be an Integer" in message
    assert _processes_under(cluster.root) == []
