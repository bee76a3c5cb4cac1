"""How the supervisor launches task subprocesses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from storm_bridge.cluster.supervisor import component_argv
from topology_api.topology import load_topology

WriteTopology = Callable[..., Path]


def test_argv_as_sparse_submit_writes_it(write_topology: WriteTopology) -> None:
    topology = load_topology(write_topology())
    spout = topology.components["word_spout"]
    bin_dir = Path("/venv/bin")
    assert component_argv(spout, serializer="json", bin_dir=bin_dir) == [
        "/venv/bin/streamparse_run",
        spout.script,
    ]
    assert component_argv(spout, serializer="msgpack", bin_dir=bin_dir) == [
        "/venv/bin/streamparse_run",
        f"-s msgpack {spout.script}",
    ]


def test_other_shell_commands_run_as_given(write_topology: WriteTopology) -> None:
    spout = load_topology(write_topology()).components["word_spout"]
    node = replace(spout, command="node", script="splitsentence.js")
    argv = component_argv(node, serializer="msgpack", bin_dir=Path("/venv/bin"))
    assert argv == ["node", "splitsentence.js"]  # ShellBolt(command, script)
