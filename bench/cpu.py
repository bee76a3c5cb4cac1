"""CPU seconds of processes, for benchmarks that explain a time by its work.

On a machine with ``n`` cores a transfer that costs ``c`` CPU seconds in all its
processes cannot finish in less than ``c / n`` seconds of wall time, however it is
scheduled: the benchmarks print that bound next to the time they measure.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

_HZ = os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """User plus system CPU seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pids_cpu_s(pids: Iterable[int | None]) -> float:
    """User plus system CPU seconds of the live processes ``pids``.

    A process that is gone (killed mid-run) counts 0: rows with kills are not
    used for CPU figures.
    """
    total = 0.0
    for pid in pids:
        if pid is None:
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / _HZ  # utime, stime
    return total


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0))
