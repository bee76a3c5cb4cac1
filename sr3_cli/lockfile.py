"""An exclusive lock on a file (``fcntl.flock``), waited for with a deadline.

The holder writes its pid into the file, so one who waits too long can say who
holds it. The kernel drops the lock when its holder exits, even by SIGKILL, so a
crashed command never leaves the lab locked; the file itself stays (deleting a
lock file lets two processes lock two different files).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sr3.errors import SR3Error

__all__ = ["LockTimeoutError", "exclusive"]

_POLL_S = 0.05

E_LOCK_TIMEOUT = (
    "{path} is still locked after {timeout_s:.0f} s by {holder}, which changes the "
    "lab; wait for that command to finish and try again (if no sr3 command runs, "
    "the lock is free: run this one again)"
)


class LockTimeoutError(SR3Error, TimeoutError):
    """Another process held a lock file longer than we were willing to wait."""

    retriable = True


def _holder(path: Path) -> str:
    try:
        pid = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return "another process"
    return f"pid {pid}"


@contextlib.contextmanager
def exclusive(
    path: Path,
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block.

    The descriptor is not inherited by child processes (PEP 446), so a daemon
    started while the lock is held does not keep it held.

    Raises:
        LockTimeoutError: another process held it for ``timeout_s``; the message
            names the file and the holder's pid.
        OSError: ``path`` cannot be created or opened.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = clock() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    msg = E_LOCK_TIMEOUT.format(
                        path=path, timeout_s=timeout_s, holder=_holder(path)
                    )
                    raise LockTimeoutError(msg) from None
                sleep(_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # free now: name no holder
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
