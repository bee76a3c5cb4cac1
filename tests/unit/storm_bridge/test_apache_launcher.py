"""Java command lines for Apache Storm daemons and clients (no JVM is started)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from storm_bridge.apache.home import StormHome, StormMissingError, pinned_version
from storm_bridge.apache.launcher import daemon_command, jar_command, storm_options
from storm_bridge.apache.state import StormClusterInfo, SupervisorInfo


def _decode(value: str) -> dict[str, object]:
    """Read ``-Dstorm.options`` as Storm's ``Utils.readCommandLineOpts`` does."""
    out: dict[str, object] = {}
    for pair in value.split(","):
        key, _, raw = urllib.parse.unquote_plus(pair).partition("=")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


@pytest.fixture
def home(tmp_path: Path) -> StormHome:
    return StormHome(root=tmp_path / "storm-9.9.9", version="9.9.9")


def test_storm_options_survive_storms_decoding() -> None:
    options = {
        "storm.local.dir": "/lab/storm/local/supervisor-1",
        "supervisor.slots.ports": [6700, 6701],
        "topology.debug": True,
        "a.string": "x=y,z",
    }
    assert _decode(storm_options(options)) == options


def test_a_daemon_runs_its_main_class_with_the_labs_conf_and_logs(
    home: StormHome, tmp_path: Path
) -> None:
    conf = tmp_path / "conf" / "storm.yaml"
    argv = daemon_command(
        home,
        "supervisor",
        conf_file=conf,
        log_dir=tmp_path / "logs",
        name="supervisor-2",
        heap_mb=200,
        java="/jdk/bin/java",
    )
    assert argv[0] == "/jdk/bin/java"
    assert argv[-1] == "org.apache.storm.daemon.supervisor.Supervisor"
    assert "-Xmx200m" in argv
    assert f"-Dstorm.home={home.root}" in argv
    assert f"-Dstorm.conf.file={conf}" in argv
    assert "-Dlogfile.name=supervisor-2.log" in argv
    classpath = argv[argv.index("-cp") + 1].split(":")
    assert classpath[0] == f"{home.root}/lib/*"
    assert str(conf.parent) in classpath


def test_an_unknown_daemon_is_refused(home: StormHome, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="drpc"):
        daemon_command(
            home, "drpc", conf_file=tmp_path / "s.yaml", log_dir=tmp_path, java="j"
        )


def test_a_jar_run_puts_the_jar_after_lib_worker_and_names_it_storm_jar(
    home: StormHome, tmp_path: Path
) -> None:
    jar = tmp_path / "topology.jar"
    argv = jar_command(
        home, jar, "org.example.Main", ["--remote", "t.yaml"], java="java"
    )
    classpath = argv[argv.index("-cp") + 1].split(":")
    assert classpath[0] == f"{home.root}/lib-worker/*"
    assert classpath.index(str(jar)) > 0
    assert f"-Dstorm.jar={jar}" in argv
    assert argv[-3:] == ["org.example.Main", "--remote", "t.yaml"]


def test_an_unfetched_home_names_the_missing_jar(tmp_path: Path) -> None:
    with pytest.raises(StormMissingError, match=r"storm-server-.*fetch-jars\.sh"):
        StormHome.locate(cache_dir=tmp_path)


def test_the_pinned_version_is_read_from_the_pom() -> None:
    assert pinned_version().startswith("2.")


def test_cluster_info_round_trips_through_json() -> None:
    info = StormClusterInfo(
        version="2.8.3",
        storm_home="/h",
        conf_file="/c/storm.yaml",
        zk_hosts="127.0.0.1:2181",
        zk_root="/storm",
        nimbus_port=6627,
        nimbus_pid=10,
        supervisors=(SupervisorInfo(1, "/l/supervisor-1", (1, 2), 3, 11),),
    )
    raw = json.loads(json.dumps(info.to_json()))
    assert StormClusterInfo.from_json(raw) == info
