"""Which processes in ``/proc`` are a Storm cluster's daemons and workers.

A pid recorded in ``cluster.json`` is this cluster's only while its command
line says so (a stale file's pids may have been recycled): Nimbus reads the
cluster's ``storm.yaml``, a supervisor carries ``-Dsr3.storm.dir`` of its local
dir. Workers are not recorded at all (supervisors start them), so they are
found by their ``storm.local.dir`` or, for their Python subprocesses, their
working dir.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from storm_bridge.apache.launcher import DAEMON_MAINS
from storm_bridge.apache.procs import cmdline, cwd, pids
from storm_bridge.apache.state import StormClusterInfo, SupervisorInfo

__all__ = [
    "LOG_WRITER_MAIN",
    "WORKER_MAIN",
    "cluster_processes",
    "is_nimbus",
    "is_supervisor",
    "worker_pids",
]

WORKER_MAIN: Final = "org.apache.storm.daemon.worker.Worker"
#: The JVM a supervisor starts per worker; its argv holds the worker's command.
LOG_WRITER_MAIN: Final = "org.apache.storm.LogWriter"


def is_nimbus(pid: int, conf_file: Path) -> bool:
    """Whether ``pid`` is a live Nimbus reading ``conf_file``."""
    argv = cmdline(pid)
    return DAEMON_MAINS["nimbus"] in argv and f"-Dstorm.conf.file={conf_file}" in argv


def is_supervisor(sup: SupervisorInfo) -> bool:
    """Whether ``sup.pid`` is a live supervisor of ``sup``'s local dir."""
    argv = cmdline(sup.pid) if sup.pid else []
    return (
        DAEMON_MAINS["supervisor"] in argv
        and f"-Dsr3.storm.dir={sup.local_dir}" in argv
    )


def worker_pids(supervisors: Iterable[SupervisorInfo]) -> list[int]:
    """Return the worker JVMs of ``supervisors``.

    A worker is an ``org.apache.storm.daemon.worker.Worker`` JVM whose
    ``-Dstorm.local.dir`` is its supervisor's, found in ``/proc``; each has a
    LogWriter JVM as its parent, not counted here.
    """
    marks = {f"-Dstorm.local.dir={s.local_dir}" for s in supervisors}
    found = []
    for pid in pids():
        argv = cmdline(pid)
        is_worker = WORKER_MAIN in argv and LOG_WRITER_MAIN not in argv
        if is_worker and marks & set(argv):
            found.append(pid)
    return sorted(found)


def cluster_processes(root: Path, info: StormClusterInfo | None) -> list[int]:
    """Workers, their LogWriters and their Python subprocesses (any supervisor).

    Args:
        root: The cluster's root dir (its ``local/`` holds every local dir).
        info: What ``cluster.json`` records: its daemons are left out.
    """
    local = f"{root}/local/"
    found = []
    daemons = {info.nimbus_pid} if info else set()
    daemons |= {s.pid for s in info.supervisors} if info else set()
    for pid in pids():
        if pid in daemons or pid == os.getpid():
            continue
        argv = cmdline(pid)
        if not argv:
            continue
        if any(a.startswith(f"-Dstorm.local.dir={local}") for a in argv) or (
            f"{cwd(pid)}/".startswith(local)
        ):
            found.append(pid)
    return sorted(found)
