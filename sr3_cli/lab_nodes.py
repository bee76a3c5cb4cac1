"""The lab's ring node processes: starting one, waiting for its READY line.

Each node runs ``python -m sr3_cli node`` (on a host of the netns lab: the
``sr3 node`` wrapper ``vagrant/provision/node.sh`` writes, as on a Vagrant VM)
in a session of its own, with its
data dir among its arguments (so ``sr3 lab down`` finds it even when lab.json
is stale), its stderr appended to ``<data dir>/node.log``. It is ready when it
prints ``READY <node id> <port>`` on stdout; a node that exits or stays silent
is reported with its ``sr3: error:`` line, else the tail of its log.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sr3.errors import ConfigError, SR3Error
from sr3_cli.labfile import LabNode
from sr3_cli.provision import provision
from zk.launcher import port_taken

__all__ = ["NODE_READY_TIMEOUT_S", "node_log", "spawn_node", "wait_ready"]

logger = logging.getLogger(__name__)

#: How long a started node gets to print its READY line.
NODE_READY_TIMEOUT_S: Final = 30.0


def node_log(node: LabNode) -> Path:
    """Return the log a node's stderr goes to."""
    return Path(node.data_dir) / "node.log"


def spawn_node(
    node: LabNode,
    *,
    zk_hosts: str,
    chroot: str,
    secret_file: Path,
    log_level: str,
    host: str = "127.0.0.1",
    command_prefix: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``node`` (its pid recorded in it); return its process and log offset.

    The offset is where its log of this start begins. A port recorded for it
    but now taken by another process is dropped: it listens on a new one. In
    the netns lab, ``command_prefix`` runs it in its host's namespace, through
    the wrapper ``vagrant/provision/node.sh`` writes (:mod:`sr3_cli.provision`),
    and ``host`` is the address it binds and announces.

    Raises:
        ConfigError: its data dir cannot be created; in the netns lab, the
            provisioning script is missing or failed.
    """
    try:
        Path(node.data_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = (
            f"cannot use {node.node_id}'s data dir {node.data_dir}: {exc}; move "
            "whatever is there away (the node starts empty and repair "
            "copies its replicas back)"
        )
        raise ConfigError(msg) from exc
    if node.port and not command_prefix and port_taken(node.port):
        logger.warning(
            "ring node %s's port %s is taken by another process; it "
            "listens on a new one",
            node.node_id,
            node.port,
        )
        node.port = None
    if command_prefix:
        # a host of the netns lab: started as a VM's ring node is (node.sh)
        wrapper = provision(
            "node.sh",
            Path(node.data_dir).parent / "provision" / node.node_id,
            secret_file=secret_file,
            service="node",
            env={
                "SR3_HOST_IP": host, "SR3_ZK": zk_hosts, "SR3_ZK_CHROOT": chroot,
                "SR3_NODE_PORT": str(node.port or 0), "SR3_NODE_ID": node.node_id,
                "SR3_NODE_DATA_DIR": node.data_dir, "SR3_NODE_ZONE": node.zone or "",
                "SR3_LOG_LEVEL": log_level,
            },
        )  # fmt: skip
        cmd = [*command_prefix, str(wrapper)]
    else:
        cmd = [
            sys.executable, "-m", "sr3_cli", "--log-level", log_level,
            "node", "--zk", zk_hosts, "--chroot", chroot,
            "--port", str(node.port or 0), "--data-dir", node.data_dir,
            "--node-id", node.node_id, "--secret-file", str(secret_file),
            "--host", host,
        ]  # fmt: skip
        if node.zone:
            cmd += ["--zone", node.zone]
    log = open(node_log(node), "ab")  # noqa: SIM115
    offset = log.tell()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    node.pid = proc.pid
    return proc, offset


def wait_ready(
    node_id: str, proc: subprocess.Popen[bytes], log: Path, log_offset: int
) -> int:
    """Wait for a started node's READY line; return the port it listens on.

    Raises:
        SR3Error: it exited or did not print the line in time.
    """
    if proc.stdout is None:
        msg = f"ring node {node_id} was started without a stdout pipe"
        raise SR3Error(msg)
    deadline = time.monotonic() + NODE_READY_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line or line.startswith(b"READY"):
            break
    if not line.startswith(b"READY"):
        raise SR3Error(_not_started(node_id, log, log_offset))
    proc.stdout.close()
    return int(line.split()[2])


def _not_started(node_id: str, log: Path, log_offset: int) -> str:
    """Say why a node did not start: its error line, else its log's tail."""
    try:
        with log.open("rb") as f:
            f.seek(log_offset)
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        text = f"(its log cannot be read: {exc})"
    errors = [ln for ln in text.splitlines() if ln.startswith("sr3: error: ")]
    if errors:
        reason = errors[-1].removeprefix("sr3: error: ")
        return f"ring node {node_id} did not start: {reason} (log: {log})"
    return f"ring node {node_id} did not start (see {log}):\n{text[-2000:]}"
