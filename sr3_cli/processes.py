"""Processes a lab starts: whether one runs, and stopping one."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = [
    "alive",
    "command_line",
    "lab_processes",
    "runs",
    "stop_lab_processes",
    "stop_processes",
    "terminate",
]

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


def _session_and_tty(pid: int) -> tuple[int, int] | None:
    """Return ``pid``'s session id and controlling terminal (0: none), or None."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text(encoding="utf-8")
    except OSError:
        return None
    # after "pid (comm)": state ppid pgrp session tty_nr ...
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 5 or fields[0] == "Z":
        return None
    return int(fields[3]), int(fields[4])


def _refers_to(pid: int, prefixes: tuple[str, ...]) -> bool:
    """Whether an argument of ``pid`` or its working dir is a path under a prefix."""
    args = command_line(pid) or []
    if any(prefix in arg for arg in args for prefix in prefixes):
        return True  # --data-dir DIR, a zoo.cfg, -Dx=file:DIR/..., --opt=DIR/...
    try:
        cwd = os.readlink(_PROC / str(pid) / "cwd")
    except OSError:
        return False
    return f"{cwd}/".startswith(prefixes)


def lab_processes(root: Path) -> list[int]:
    """Return the pids of the processes a lab in ``root`` started that still run.

    Found from ``/proc`` alone, for a lab whose lab.json is stale, gone or
    damaged. A lab starts every daemon (ring node, ZooKeeper, Spark master and
    worker, any kind added later) in a session of its own, without a terminal,
    with a path under ``root`` among its arguments (a node's ``--data-dir``,
    ZooKeeper's zoo.cfg) or as its working dir (Spark's). So a process counts
    when it has no controlling terminal, refers to ``root`` that way, and leads
    its session or sits in the session of one that counts or is gone (a Spark
    executor under its worker). A ``tail -f`` of a lab log in a terminal, an
    ``sr3 run`` a script started with a checkpoint dir in the lab, and the
    session of the caller itself never count.
    """
    prefixes = tuple({f"{root}/", f"{root.resolve()}/"})
    own_session = os.getsid(0)
    live: set[int] = set()
    candidates: dict[int, int] = {}  # pid -> its session id
    for entry in _PROC.glob("[0-9]*"):
        pid = int(entry.name)
        info = _session_and_tty(pid)
        if info is None:
            continue
        live.add(pid)
        session, tty = info
        if tty == 0 and session != own_session and _refers_to(pid, prefixes):
            candidates[pid] = session
    return sorted(
        pid
        for pid, session in candidates.items()
        if session == pid or session in candidates or session not in live
    )


def stop_lab_processes(root: Path, pids: list[int]) -> None:
    """Stop what :func:`lab_processes` found in ``root``: its ZooKeeper last.

    As ``sr3 lab down`` does with a readable lab.json: the nodes and other
    daemons first, so each leaves the ring and closes its session while
    ZooKeeper still answers.
    """
    zk_dir = (f"{root}/zk/", f"{root.resolve()}/zk/")
    last = [pid for pid in pids if _refers_to(pid, zk_dir)]
    stop_processes([pid for pid in pids if pid not in last])
    stop_processes(last)


def stop_processes(pids: list[int], grace_s: float = 10.0) -> None:
    """SIGTERM every pid at once, then SIGKILL those still running after ``grace_s``.

    Returns once none runs, or 5 s after the SIGKILL (a process stuck in the
    kernel cannot be helped).
    """
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        running = [pid for pid in pids if alive(pid)]
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while running and time.monotonic() < deadline:
            time.sleep(0.05)  # not our children: no wait() to block on, so poll
            running = [pid for pid in running if alive(pid)]
        if not running:
            return


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
