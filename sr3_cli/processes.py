"""Processes a lab starts: whether one runs, and stopping one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["alive", "terminate"]


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
