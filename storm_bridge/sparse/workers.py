"""The processes of a topology on this machine's Storm workers, found in ``/proc``.

A worker is a JVM running ``org.apache.storm.daemon.worker.Worker`` with
``-Dstorm.id=<topology id>``, ``-Dworker.port=<slot>`` and
``-Dworkers.artifacts=<dir>``; its ``worker.log`` in
``<dir>/<topology id>/<port>/`` records, for every ShellBolt or ShellSpout,
``Launched subprocess with pid N`` on the thread of the task's executor
(``<component>-executor[<task>, <task>]``). That maps a task to the Python
process ``--kill COMPONENT:INDEX`` SIGKILLs; INDEX counts the component's task
ids in ascending order, as the local cluster does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "TaskProcess",
    "WorkerProcess",
    "logged_lines",
    "task_processes",
    "worker_processes",
]

WORKER_MAIN: Final = "org.apache.storm.daemon.worker.Worker"
#: The JVM a supervisor starts first; its argv holds the worker's whole command.
LOG_WRITER: Final = "org.apache.storm.LogWriter"
#: What a Python task logs through Storm: ``ShellLog pid:N, name:COMPONENT text``.
_SHELL_LOG: Final = re.compile(
    r"ShellLog pid:\d+, name:(?P<component>\S+) (?P<text>.*)"
)
#: How much of a worker.log's end :func:`logged_lines` reads.
_TAIL_BYTES: Final = 1 << 18
_LAUNCHED: Final = re.compile(
    r"\[Thread-\d+-(?P<component>.+?)-executor\[(?P<task>-?\d+), -?\d+\]\] "
    r"Launched subprocess with pid (?P<pid>\d+)"
)


@dataclass(frozen=True)
class WorkerProcess:
    """A worker JVM of a topology."""

    pid: int
    port: int
    log: Path


@dataclass(frozen=True)
class TaskProcess:
    """The Python process of one task, as its worker last launched it."""

    component: str
    task_id: int
    pid: int
    worker: WorkerProcess


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _flag(argv: list[str], name: str) -> str | None:
    prefix = f"-D{name}="
    return next((a[len(prefix) :] for a in argv if a.startswith(prefix)), None)


def worker_processes(topology_id: str) -> list[WorkerProcess]:
    """Return the live worker JVMs of ``topology_id`` on this machine, by port."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = _cmdline(int(entry))
        if WORKER_MAIN not in argv or LOG_WRITER in argv:
            continue
        if _flag(argv, "storm.id") != topology_id:
            continue
        port, artifacts = _flag(argv, "worker.port"), _flag(argv, "workers.artifacts")
        if port is None or artifacts is None or not port.isdigit():
            continue
        log = Path(artifacts) / topology_id / port / "worker.log"
        found.append(WorkerProcess(pid=int(entry), port=int(port), log=log))
    return sorted(found, key=lambda w: w.port)


def _alive_child(pid: int, parent: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the fields after the command name (which may hold spaces) start with state
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and int(fields[1]) == parent


def task_processes(topology_id: str) -> dict[str, list[TaskProcess]]:
    """Return each Python component's live task processes, by ascending task id."""
    latest: dict[int, TaskProcess] = {}
    for worker in worker_processes(topology_id):
        try:
            text = worker.log.read_text(errors="replace")
        except OSError:
            continue
        for match in _LAUNCHED.finditer(text):
            task = TaskProcess(
                component=match["component"],
                task_id=int(match["task"]),
                pid=int(match["pid"]),
                worker=worker,
            )
            latest[task.task_id] = task  # a restart logs a newer line
    by_component: dict[str, list[TaskProcess]] = {}
    for task in sorted(latest.values(), key=lambda t: t.task_id):
        if _alive_child(task.pid, task.worker.pid):
            by_component.setdefault(task.component, []).append(task)
    return by_component


def logged_lines(logs: Iterable[Path], marks: Sequence[str]) -> list[str]:
    """Return ``component: text`` of the tasks' log lines holding one of ``marks``.

    Only the last 256 KB of each ``worker.log`` are read.
    """
    found = []
    for log in logs:
        try:
            with log.open("rb") as data:
                data.seek(max(0, log.stat().st_size - _TAIL_BYTES))
                text = data.read().decode(errors="replace")
        except OSError:
            continue
        for match in _SHELL_LOG.finditer(text):
            if any(mark in match["text"] for mark in marks):
                found.append(f"{match['component']}: {match['text'].strip()}")
    return found
