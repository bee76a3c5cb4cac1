"""The ``storm`` command's translation of streamparse's Storm 1.x flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr3.errors import ConfigError
from sr3_cli.storm_launcher import FLUX_MAIN, LOCAL_MAIN, local_command
from sr3_cli.storm_launcher import translate_flux_args as translate
from sr3_cli.storm_run_cmd import parse_index_kill
from storm_bridge.apache import StormHome


def test_sparse_run_flags_become_local_mode_with_seconds() -> None:
    args = ["--local", "--no-splash", "--sleep", "45", "/tmp/t.yaml"]
    assert translate(args) == (["--no-splash", "/tmp/t.yaml"], True, 45)


def test_sparse_run_forever_has_no_time_to_live() -> None:
    forever = "9223372036854775807"
    assert translate(["--local", "--sleep", forever, "t.yaml"]) == (
        ["t.yaml"],
        True,
        None,
    )


def test_remote_flux_args_pass_through() -> None:
    assert translate(["--remote", "t.yaml"]) == (["--remote", "t.yaml"], False, None)


def test_sleep_without_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        translate(["--sleep", "soon"])


def test_local_command_puts_the_topology_jar_first(tmp_path: Path) -> None:
    home = StormHome(root=tmp_path / "storm-2.8.3", version="2.8.3")
    cmd = local_command(
        home,
        tmp_path / "t.jar",
        FLUX_MAIN,
        ["t.yaml"],
        ttl_s=30,
        options={"sr3.zk.hosts": "127.0.0.1:2181"},
    )
    classpath = cmd[cmd.index("-cp") + 1]
    assert classpath.split(":")[0] == str((tmp_path / "t.jar").resolve())
    assert "-Dstorm.local.sleeptime=30" in cmd
    assert cmd[-3:] == [LOCAL_MAIN, FLUX_MAIN, "t.yaml"]
    assert any(a.startswith("-Dstorm.options=sr3.zk.hosts") for a in cmd)


def test_index_kills_parse_and_name_the_form() -> None:
    assert parse_index_kill("--kill-worker", "1@2.5") == (1, 2.5)
    with pytest.raises(ConfigError, match="INDEX@SECONDS"):
        parse_index_kill("--kill-worker", "worker1@2")
    with pytest.raises(ConfigError, match="counts from 0"):
        parse_index_kill("--kill-supervisor", "-1@2")
