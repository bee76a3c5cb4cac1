"""``sr3`` starts without loading what the command does not use.

Every ``sr3`` process (each ring node of a lab, every ``sr3 run``, each chaos
child) builds the whole parser first: its options must not pull in Spark, Storm
or ZooKeeper clients. Each case runs ``sr3_cli.main.main`` in a fresh
interpreter and lists the modules it loaded.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.main import build_parser

#: Engines, clients and bridges a parser must never need.
HEAVY = (
    "pyspark",
    "pyarrow",
    "pandas",
    "numpy",
    "kazoo",
    "streamparse",
    "pystorm",
    "storm_bridge",
    "spark_bridge",
    "topology_api",
    "backend",
    "zk",
)
#: Modules of the other commands, which ``sr3 node`` does not run.
OTHER_COMMANDS = (
    "sr3_cli.commands",
    "sr3_cli.cluster",
    "sr3_cli.lab",
    "sr3_cli.topology_cmd",
    "sr3_cli.chaos_cmd",
    "sr3_cli.compare",
)

_PROBE = """
import contextlib, io, json, sys
from sr3_cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _loaded(*args: str) -> tuple[int, str, set[str]]:
    """Run ``sr3 ARGS`` in a fresh interpreter; return code, output, modules."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    return result["code"], result["out"], set(result["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["node"],
        ["run"],
        ["chaos"],
        ["compare"],
        ["lab", "up"],
        ["savepoint", "create"],
        ["rebalance"],
    ],
    ids=lambda words: " ".join(["sr3", *words, "--help"]),
)
def test_help_loads_no_engine_or_client(command: list[str]) -> None:
    code, out, modules = _loaded(*command, "--help")
    assert code == 0
    assert out.startswith("usage: sr3")
    assert _heavy(modules) == []


def test_a_usage_error_is_reported_without_loading_an_engine() -> None:
    code, out, modules = _loaded("chaos", "--kinds", "melt-cpu")
    assert code == 2
    assert "unknown fault kind melt-cpu" in out
    assert _heavy(modules) == []


def test_node_loads_the_ring_node_and_no_other_command(tmp_path: Path) -> None:
    # refused after its module loaded, before it connects anywhere
    anywhere = "0.0.0.0"  # noqa: S104 - the address it refuses
    code, out, modules = _loaded(
        "node", "--zk", "127.0.0.1:1", "--host", anywhere, "--data-dir", str(tmp_path)
    )
    assert code == 2
    assert "--host 0.0.0.0 binds every interface" in out
    assert "zk.node" in modules
    engines = [m for m in _heavy(modules) if m.split(".")[0] not in ("zk", "kazoo")]
    assert engines == []
    assert sorted(m for m in OTHER_COMMANDS if m in modules) == []
    # a node serves the relay ops; the planner and the client's recovery are not its
    client_side = ("sr3.recovery.recover", "sr3.recovery.planner", "zk.launcher")
    assert sorted(m for m in client_side if m in modules) == []


def test_state_dump_reads_the_ring_without_loading_the_engines(tmp_path: Path) -> None:
    # refused after its module loaded, before it connects anywhere
    missing = tmp_path / "no-lab"
    code, out, modules = _loaded(
        "state", "dump", "--topology", "t", "--component", "c", "--lab", str(missing)
    )
    assert code == 2
    assert f"no lab in {missing}" in out
    assert "storm_bridge.wiring" in modules
    # the ring client only: no local cluster, engine, streamparse or Spark
    loaded = sorted(
        m
        for m in modules
        if m.split(".")[0] in ("pyspark", "pyarrow", "streamparse", "thriftpy2")
        or m.startswith(("storm_bridge.runner", "storm_bridge.cluster"))
        or m.startswith(("storm_bridge.components", "sr3_cli.topology_cmd"))
    )
    assert loaded == []


def test_a_local_cluster_run_loads_no_other_engine(tmp_path: Path) -> None:
    # refused after its module loaded, before it starts anything
    missing = tmp_path / "missing.py"
    code, out, modules = _loaded("run", str(missing), "--until-idle")
    assert code == 2
    assert f"topology file {missing} does not exist" in out
    assert "sr3_cli.topology_cmd" in modules
    other = ("sr3_cli.spark_run_cmd", "sr3_cli.storm_run_cmd", "sr3_cli.commands")
    assert sorted(m for m in modules if m in other) == []
    assert sorted(m for m in modules if m.startswith("storm_bridge.sparse")) == []
    assert sorted(m for m in modules if m.split(".")[0] == "pyspark") == []


def _handlers(parser: argparse.ArgumentParser, words: str) -> Iterator[tuple[str, Any]]:
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - as above
            for name, sub in action.choices.items():
                yield from _handlers(sub, f"{words} {name}")
    found = parser.get_default("handler")
    if found is not None:
        yield words, found


def test_every_sub_command_reaches_its_handler() -> None:
    handlers = dict(_handlers(build_parser(), "sr3"))
    assert len(handlers) == 21  # every leaf sub-command has one
    for words, lazy in handlers.items():
        module = importlib.import_module(lazy.module)
        assert callable(getattr(module, lazy.name, None)), (words, lazy)
