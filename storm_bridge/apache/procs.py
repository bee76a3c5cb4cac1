"""Ports and processes of a Storm cluster: free ports, ``/proc`` look-ups, stopping."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from sr3.net import bindable, free_port

__all__ = ["cmdline", "cwd", "free_port", "pids", "port_free", "terminate_all"]

logger = logging.getLogger(__name__)


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on every address (as Storm's servers do)."""
    return bindable("0.0.0.0", port)  # noqa: S104 (Storm's servers bind every address)


def cmdline(pid: int) -> list[str]:
    """Return the argv of a live, non-zombie ``pid``, else []."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    if stat.rpartition(")")[2].split()[0] in ("Z", "X"):
        return []
    return raw.decode("utf-8", errors="replace").split("\0")


def cwd(pid: int) -> str:
    """Return ``pid``'s working dir ("" if gone or not ours to read)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def pids() -> list[int]:
    """Return the pids in ``/proc``."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def terminate_all(
    targets: list[int],
    children: dict[int, subprocess.Popen[bytes]],
    *,
    grace_s: float,
) -> None:
    """SIGTERM ``targets`` at once, SIGKILL those left after ``grace_s``; reap children.

    ``children`` maps the pids this process started to their Popen (removed
    once reaped); other pids (workers, which supervisors start) are polled.
    """

    def running(pid: int) -> bool:
        proc = children.get(pid)
        if proc is not None:
            return proc.poll() is None
        return bool(cmdline(pid))

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        live = [p for p in targets if running(p)]
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while live and time.monotonic() < deadline:
            time.sleep(0.05)  # workers are not our children: poll
            live = [p for p in live if running(p)]
        if not live:
            break
        logger.warning("Storm pids %s ignored %s", live, signal.Signals(sig).name)
    for pid in targets:
        proc = children.pop(pid, None)
        if proc is not None:
            proc.wait()
