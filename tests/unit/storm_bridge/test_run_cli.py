"""``sr3 run`` and ``sr3 state dump`` argument handling (no cluster started)."""

from __future__ import annotations

import pytest

from sr3.errors import ConfigError
from sr3_cli.main import build_parser, main
from sr3_cli.topology_cmd import parse_kill, parse_node_kill
from storm_bridge.runner import NodeKill, TaskKill


def test_kill_specs_parse() -> None:
    assert parse_kill("count:2@1.5") == TaskKill("count", 2, 1.5)
    assert parse_kill("a:b:0@3") == TaskKill("a:b", 0, 3.0)
    assert parse_node_kill("node-2@0.5") == NodeKill("node-2", 0.5)


@pytest.mark.parametrize("text", ["count@1", "count:x@1", "count:1", "count:1@soon"])
def test_bad_kill_specs_say_the_form(text: str) -> None:
    with pytest.raises(ConfigError, match="COMPONENT:INDEX@SECONDS"):
        parse_kill(text)


def test_storm_only_options_are_refused_on_spark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["run", "topologies/wordcount.py", "--engine", "spark", "--until-idle"]
        + ["--kill", "count:0@1"]
    )
    assert code == 2
    assert "--kill (Spark retries its own tasks" in capsys.readouterr().err


def test_spark_run_needs_an_end(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "topologies/wordcount.py", "--engine", "spark"])
    assert code == 2
    assert "--until-idle, --duration S or --max-batches N" in capsys.readouterr().err


def test_run_needs_an_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "topologies/wordcount.py", "--zk", "127.0.0.1:1"]) == 2
    assert "--until-idle or --duration" in capsys.readouterr().err


def test_kills_can_be_listed_or_repeated() -> None:
    args = build_parser().parse_args(
        ["run", "wc.py", "--kill", "count:0@1", "count:1@2", "--kill", "split:0@3"]
        + ["--kill-node", "node-2@1", "--until-idle", "--json"]
    )
    assert args.kill == ["count:0@1", "count:1@2", "split:0@3"]
    assert args.kill_node == ["node-2@1"]
    assert args.until_idle and args.json
