"""Checks of ``sr3 run``'s arguments made before any cluster, task or query starts.

A run that starts replaces the topology's committed state with its own epochs,
so an argument that can only fail mid-run (a mistyped ``-o`` key, a ``--kill-node``
naming no node) is refused here, while the last committed state is still intact.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from storm_bridge.groupings import INTEGER_BOXING_KEY
from storm_bridge.kafka.settings import KAFKA_KEYS
from storm_bridge.native import MODE_KEY, QUIET_KEY
from storm_bridge.outputs import KEY_FIELDS_KEY
from storm_bridge.runner import INTERVAL_KEY, TIMEOUT_KEY, NodeKill, TaskKill

__all__ = [
    "ENGINE_KEYS",
    "check_conf",
    "check_node_ids",
    "check_topology_file",
    "parse_conf",
    "parse_kill",
    "parse_node_kill",
]

#: ``sr3.*`` conf keys the engines read besides :class:`Sr3Config`'s: add a new
#: one here, or ``sr3 run -o`` refuses it. The Spark one is spelled out
#: (``spark_bridge.stages.ON_ERROR_KEY``): importing it would load pandas and
#: pyarrow for every ``sr3 run``; so is the local cluster's idle quiet period.
ENGINE_KEYS: Final = KAFKA_KEYS | frozenset(
    {
        INTERVAL_KEY,
        TIMEOUT_KEY,
        MODE_KEY,
        QUIET_KEY,
        KEY_FIELDS_KEY,
        INTEGER_BOXING_KEY,
        "sr3.idle.quiet.s",
        "sr3.on.error",
    }
)


def check_conf(conf: Mapping[str, Any]) -> None:
    """Check the ``sr3.*`` keys of ``-o`` overrides; other keys are the topology's.

    Raises:
        ConfigError: an unknown ``sr3.*`` key (with the closest known ones), or a
            value :class:`Sr3Config` refuses.
    """
    core = set(Sr3Config.known_keys())
    known = sorted(core | ENGINE_KEYS)
    for key in conf:
        if key.startswith("sr3.") and key not in known:
            close = difflib.get_close_matches(key, known, n=3)
            hint = (
                f"did you mean {' or '.join(close)}?"
                if close
                else f"known keys: {', '.join(known)}"
            )
            msg = f"-o {key}: unknown sr3 key; {hint}"
            raise ConfigError(msg)
    Sr3Config.from_mapping({k: v for k, v in conf.items() if k in core})


def check_topology_file(path: str) -> None:
    """Check that ``path`` names a topology file, not nothing or a directory.

    Raises:
        ConfigError: it does not exist or is not a file.
    """
    file = Path(path)
    if file.is_dir():
        found = sorted(p.name for p in file.glob("*.py"))[:8]
        choice = f" (it holds {', '.join(found)})" if found else ""
        msg = (
            f"topology file {path} is a directory{choice}; "
            "give the .py file, as topologies/wordcount.py"
        )
        raise ConfigError(msg)
    if not file.is_file():
        msg = f"topology file {path} does not exist; give a .py file with a Topology"
        raise ConfigError(msg)


def check_node_ids(node_ids: Iterable[str], lab_nodes: Iterable[str]) -> None:
    """Check that every ``--kill-node`` names a node of the run's lab.

    Raises:
        ConfigError: the first id that does not.
    """
    known = sorted(lab_nodes)
    for node_id in node_ids:
        if node_id not in known:
            msg = (
                f"--kill-node {node_id}: the lab has no such node "
                f"(nodes: {', '.join(known) or 'none'})"
            )
            raise ConfigError(msg)


def parse_kill(text: str) -> TaskKill:
    """Parse ``COMPONENT:INDEX@SECONDS``.

    Raises:
        ConfigError: the text does not have that form.
    """
    try:
        target, at = text.rsplit("@", 1)
        component, index = target.rsplit(":", 1)
        kill = TaskKill(component, int(index), float(at))
    except ValueError as exc:
        msg = f"--kill {text!r}: write COMPONENT:INDEX@SECONDS, as count:0@2.5"
        raise ConfigError(msg) from exc
    if not component:
        msg = f"--kill {text!r}: name the component, as count:0@2.5"
        raise ConfigError(msg)
    _check_moment("--kill", text, kill.at_s)
    return kill


def _check_moment(flag: str, text: str, at_s: float) -> None:
    if not math.isfinite(at_s) or at_s < 0:
        msg = f"{flag} {text!r}: SECONDS after the start must be a number >= 0"
        raise ConfigError(msg)


def parse_node_kill(text: str) -> NodeKill:
    """Parse ``NODE@SECONDS``.

    Raises:
        ConfigError: the text does not have that form.
    """
    try:
        node, at = text.rsplit("@", 1)
        kill = NodeKill(node, float(at))
    except ValueError as exc:
        msg = f"--kill-node {text!r}: write NODE@SECONDS, as node-2@3"
        raise ConfigError(msg) from exc
    if not node:
        msg = f"--kill-node {text!r}: name the node, as node-2@3"
        raise ConfigError(msg)
    _check_moment("--kill-node", text, kill.at_s)
    return kill


def parse_conf(items: list[str]) -> dict[str, Any]:
    """Parse ``-o KEY=VALUE`` overrides (VALUE as JSON, else a string); check them.

    Raises:
        ConfigError: an item without ``=``, or a bad ``sr3.*`` key (see
            :func:`check_conf`).
    """
    conf: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            msg = f"-o {item!r}: write KEY=VALUE (VALUE as JSON, or a plain string)"
            raise ConfigError(msg)
        try:
            conf[key] = json.loads(raw)
        except json.JSONDecodeError:
            conf[key] = raw
    check_conf(conf)
    return conf
