"""A local-cluster task loads only what its component runs.

The local cluster starts one ``streamparse_run`` subprocess per task and per
restart (hundreds in a test session). A spout's or plain bolt's task imports the
topology module, which names :class:`StatefulBolt` too, but must not load the
stateful runtime (ring client, recovery, the backend) nor kazoo; a stateful
bolt loads them when its handshake starts it. Each case imports in a fresh
interpreter and lists the modules loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOPOLOGIES = Path(__file__).resolve().parents[2] / "e2e" / "topologies"
#: What only a stateful bolt's task (or a ZooKeeper client) needs.
STATEFUL_ONLY = (
    "kazoo",
    "backend",
    "sr3.recovery",
    "sr3.client",
    "sr3.state",
    "storm_bridge.bolt_native",
    "storm_bridge.bolt_runtime",
    "zk.client",
)

_PROBE = """
import importlib, json, sys
import streamparse.run  # what streamparse_run imports first
sys.path.append(sys.argv[1])
module = importlib.import_module(sys.argv[2])
for name in sys.argv[3:]:
    getattr(module, name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(module: str, *names: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(TOPOLOGIES), module, *names],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(proc.stdout))


def _stateful_only(modules: set[str]) -> list[str]:
    packages = tuple(f"{name}." for name in STATEFUL_ONLY)
    return sorted(m for m in modules if m in STATEFUL_ONLY or m.startswith(packages))


def test_a_topology_module_loads_no_stateful_runtime_or_zookeeper_client() -> None:
    modules = _loaded("exact_parts", "Lines", "Split", "Count", "Sink")
    assert "storm_bridge.stateful" in modules
    assert _stateful_only(modules) == []
