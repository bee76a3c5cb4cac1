"""lab.json's records: field checks, the node record, and the atomic write."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sr3.config_values import check_zk_hosts
from sr3.errors import ConfigError
from sr3_cli.processes import runs as _runs

__all__ = [
    "LabNode",
    "external_zk",
    "lab_nodes",
    "optional_object",
    "pid_value",
    "port_value",
    "write_atomically",
]


@dataclass
class LabNode:
    """One ring node of the lab."""

    node_id: str
    data_dir: str
    zone: str | None = None
    pid: int | None = None
    port: int | None = None

    @property
    def alive(self) -> bool:
        """Whether its process runs (a pid now another program's does not)."""
        return _runs(self.pid, Path(self.data_dir))


def port_value(value: object) -> int:
    """Return ``value`` if it is a TCP port (ValueError if not)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**16:
        msg = f"zk_port {value!r} is not a TCP port"
        raise ValueError(msg)
    return value


def external_zk(value: object) -> str | None:
    """Return ``value`` if a ZooKeeper connect string or None (ValueError if not)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "/" in value:
        msg = f"zk_external {value!r} is not a ZooKeeper connect string (HOST:PORT,...)"
        raise ValueError(msg)
    try:
        return check_zk_hosts(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc


def pid_value(value: object) -> int | None:
    """Return ``value`` if it is a process id or None (ValueError if not)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value <= 0
    ):
        msg = f"pid {value!r} is not a process id"
        raise ValueError(msg)
    return value


def optional_object(name: str, value: object) -> dict[str, Any] | None:
    """Return section ``name``'s ``value`` if an object or None (TypeError if not)."""
    if value is not None and not isinstance(value, dict):
        msg = f"{name} {value!r} is not an object"
        raise TypeError(msg)
    return value


def _nodes(raw: dict[str, Any]) -> dict[str, Any]:
    nodes = raw.get("nodes", {})
    if not isinstance(nodes, dict):
        msg = f"nodes {nodes!r} is not an object"
        raise TypeError(msg)
    return nodes


def _lab_node(node_id: str, raw: object) -> LabNode:
    if not isinstance(raw, dict):
        msg = f"node {node_id!r} is {raw!r}, not an object"
        raise TypeError(msg)
    node = LabNode(**raw)
    node.pid = pid_value(node.pid)
    if node.port is not None:
        node.port = port_value(node.port)
    if node.node_id != node_id or not isinstance(node.data_dir, str):
        msg = f"node {node_id!r} has id {node.node_id!r}, data dir {node.data_dir!r}"
        raise ValueError(msg)
    return node


def lab_nodes(raw: dict[str, Any]) -> dict[str, LabNode]:
    """Return lab.json's ``nodes``, each checked.

    Raises:
        TypeError, ValueError: a node record is not one.
    """
    return {k: _lab_node(k, v) for k, v in _nodes(raw).items()}


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a reader sees the old file or the new one.

    Temp file, fsync, rename, fsync of the dir: a crash leaves one of the two.
    """
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
