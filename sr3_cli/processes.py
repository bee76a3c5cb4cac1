"""Processes a lab starts: whether one runs, and stopping one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["alive", "command_line", "lab_processes", "runs", "terminate"]

_PROC = Path("/proc")


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs (a zombie does not; ours is reaped)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0); reap it if it is ours
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _not_zombie(pid)
    return done == 0


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def command_line(pid: int) -> list[str] | None:
    """Return the arguments ``pid`` runs with, or None (gone, or no ``/proc``)."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]


def runs(pid: int | None, argument: Path) -> bool:
    """Whether ``pid`` runs with ``argument`` (a path) among its arguments.

    A lab keeps the pids it started in lab.json; after a reboot or a crash such
    a pid may belong to another program, which must never be counted as the
    lab's or signalled. Without ``/proc`` the pid alone decides.
    """
    if not alive(pid) or pid is None:
        return False
    args = command_line(pid)
    if args is None:
        return not (_PROC / "self" / "cmdline").exists()
    return bool({str(argument), str(argument.resolve())}.intersection(args))


def lab_processes(root: Path) -> list[int]:
    """Return the pids of ring nodes and ZooKeepers running from files under ``root``.

    Found by their arguments (a node's ``--data-dir``, ZooKeeper's zoo.cfg),
    for a lab whose lab.json is gone or damaged: what it started may still run.
    """
    prefixes = tuple({f"{root}/", f"{root.resolve()}/"})
    found = []
    for entry in _PROC.glob("[0-9]*"):
        pid = int(entry.name)
        args = command_line(pid) if pid != os.getpid() else None
        if not args or not any(arg.startswith(prefixes) for arg in args):
            continue
        node = "sr3_cli" in args and "node" in args
        if node or "org.apache.zookeeper.server.ZooKeeperServerMain" in args:
            found.append(pid)
    return sorted(found)


def terminate(pid: int | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``pid``, then SIGKILL it if it still runs after ``timeout_s``."""
    if pid is None or not alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)  # not our child: no wait() to block on, so poll
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
