"""Checks of ``sr3 run``'s arguments made before any cluster, task or query starts.

A run that starts replaces the topology's committed state with its own epochs,
so an argument that can only fail mid-run (a mistyped ``-o`` key, a ``--kill-node``
naming no node) is refused here, while the last committed state is still intact.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from backend.committer import StartPoint
from sr3.config import KEYS, Sr3Config
from sr3.config_table import unknown_key_message, unknown_keys
from sr3.errors import ConfigError
from storm_bridge.runner import NodeKill, TaskKill

__all__ = [
    "ENGINE_KEYS",
    "check_conf",
    "check_node_ids",
    "check_topology_file",
    "parse_conf",
    "parse_kill",
    "parse_node_kill",
    "start_point",
]

#: Every ``sr3.*`` key ``sr3 run -o`` accepts: the rows of :data:`sr3.config.KEYS`
#: (a key the engines read gets its row there, or ``-o`` refuses it).
ENGINE_KEYS: Final = frozenset(KEYS)


def check_conf(conf: Mapping[str, Any]) -> None:
    """Check the ``sr3.*`` keys of ``-o`` overrides; other keys are the topology's.

    Every value is checked by its key's row of :data:`sr3.config.KEYS`, as the
    engines will read it, so a bad one fails here and not mid-run.

    Raises:
        ConfigError: an unknown ``sr3.*`` key (with the closest known ones), or a
            value :class:`Sr3Config` refuses (naming the accepted values).
    """
    for key in unknown_keys(conf):
        msg = f"-o {key}: {unknown_key_message(key)}"
        raise ConfigError(msg)
    Sr3Config.from_mapping(conf)


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


def start_point(args: argparse.Namespace) -> StartPoint | None:
    """Return where ``--from-savepoint``/``--from-epoch`` start the run, or None."""
    if args.from_savepoint is None and args.from_epoch is None:
        return None
    return StartPoint(savepoint=args.from_savepoint, epoch=args.from_epoch)
