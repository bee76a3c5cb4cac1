"""A topology running on Storm as ``sr3 run --engine apache-storm`` drives it.

:class:`LiveRun` is what :func:`~storm_bridge.sparse.run.run_on_storm` holds
of a submitted topology while it runs: it injects the failures the run asks
for (each a :class:`Kill`: a task's Python process, a worker JVM, the native
coordinator's task, a lab supervisor, a ring node), watches Nimbus and the
workers' logs for task errors no restart cures, notes when Nimbus showed the
topology inactive, and tells whether every kill was followed by a rollback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from storm_bridge.errors import StormBridgeError
from storm_bridge.sparse.monitor import ControlMonitor
from storm_bridge.sparse.stats import errors_of
from storm_bridge.sparse.submit import NimbusSession
from storm_bridge.sparse.workers import (
    logged_lines,
    task_processes,
    worker_processes,
)
from topology_api.topology import LoadedTopology

__all__ = [
    "GONE_TIMEOUT_S",
    "POLL_S",
    "Kill",
    "LiveRun",
    "StormRunError",
    "Supervisors",
]

logger = logging.getLogger(__name__)

#: How often a run polls Nimbus, ZooKeeper or /proc (they send no events).
POLL_S: Final = 0.1
#: How long a killed process, supervisor or topology may take to go (or be back).
GONE_TIMEOUT_S: Final = 60.0
#: Task errors that no restart cures: the run ends at once, naming them.
_FATAL: Final = (
    "No module named",
    "ImportError",
    "cannot import name",
    # a node refusing the secret (not transient ZooKeeper losses, which retry)
    "rejected the HMAC answer",
)
_ERROR_POLL_S: Final = 2.0
E_FATAL = (
    "topology {name!r} cannot run on Storm: {error}. Fix it and run again (a "
    "missing module: put it beside the topology file or install it in the "
    "workers' virtualenv; a secret: give the ring's sr3.node.secret)"
)


class StormRunError(StormBridgeError):
    """A run on Apache Storm could not start or be driven as asked."""


@dataclass(frozen=True)
class Kill:
    """A failure to inject ``at_s`` seconds after the topology started.

    ``kind`` is ``task`` (the Python process of task ``index`` of
    ``component``), ``worker`` (worker JVM ``index`` by slot port),
    ``coordinator`` (the Python process of the spout task holding the native
    coordinator's znode at the kill),
    ``supervisor`` (the lab's supervisor ``index`` counted from 0, i.e.
    ``supervisor-<index + 1>``, restarted at once, as a process manager
    would) or ``node`` (ring node ``node``).
    """

    kind: str
    at_s: float
    index: int = 0
    component: str = ""
    node: str = ""

    @property
    def label(self) -> str:
        """How the report names it."""
        if self.kind == "task":
            return f"{self.component}:{self.index}"
        if self.kind == "node":
            return f"ring node {self.node}"
        if self.kind == "coordinator":
            return "coordinator"
        return f"{self.kind} {self.index}"


class Supervisors(Protocol):
    """The lab's supervisors (``ApacheStormCluster``)."""

    def kill_supervisor(self, index: int, sig: int = ...) -> int | None:
        """SIGKILL supervisor ``index``."""

    def restart_supervisor(self, index: int) -> int:
        """Start supervisor ``index`` again."""

    def supervisor_pid(self, index: int) -> int | None:
        """Supervisor ``index``'s pid while it runs."""


@dataclass
class LiveRun:
    """A submitted topology while ``run_on_storm`` drives it."""

    topology: LoadedTopology
    session: NimbusSession
    topology_id: str
    monitor: ControlMonitor
    supervisors: Supervisors | None
    kill_node: Callable[[str], None] | None
    clock: Callable[[], float]
    killed: list[tuple[Kill, float]] = field(default_factory=list)
    errors_checked_at: float = float("-inf")
    interval_s: float = 1.0
    logs: set[Path] = field(default_factory=set)
    #: when Nimbus last showed the topology not ACTIVE (a rebalance, a
    #: `storm deactivate`): its spouts stood still, yet the coordinator's
    #: thread kept committing, so commits before then prove no final state
    inactive_at: float | None = None

    def inject(self, kill: Kill, due_at: float) -> bool:
        """SIGKILL what ``kill`` names; False while its process is not up yet.

        A task, worker or coordinator that is not live after an earlier kill
        (its worker restarts) is waited for up to :data:`GONE_TIMEOUT_S` after
        ``due_at``, the kill's moment; then, or with no earlier kill, the run
        fails naming it.

        Raises:
            StormRunError: the target never came up, or cannot be killed.
        """
        now = self.clock()
        if kill.kind in ("task", "worker", "coordinator"):
            pid, missing = self._pid(kill)
            if pid is None:
                if self.killed and now < due_at + GONE_TIMEOUT_S:
                    return False
                raise StormRunError(missing)
            _sigkill(pid)
        elif kill.kind == "supervisor":
            self._kill_supervisor(kill)
        else:
            if self.kill_node is None:
                msg = f"--kill-node {kill.node}: this run cannot kill ring nodes"
                raise StormRunError(msg)
            self.kill_node(kill.node)
        self.killed.append((kill, now))
        logger.info("killed %s", kill.label)
        return True

    def _pid(self, kill: Kill) -> tuple[int | None, str]:
        """The live process ``kill`` names, or None and why."""
        if kill.kind == "worker":
            workers = worker_processes(self.topology_id)
            if len(workers) <= kill.index:
                count = len(workers)
                return None, f"--kill-worker {kill.index}: the topology has {count}"
            return workers[kill.index].pid, ""
        component, index = kill.component, kill.index
        if kill.kind == "coordinator":
            # the holder's name is its replayable spout task's ``component/index``
            holder = self.monitor.store.coordinator() or ""
            component, _, number = holder.rpartition("/")
            if not number.isdigit():
                return None, "kill of the coordinator: no spout task holds its znode"
            index = int(number)
        tasks = task_processes(self.topology_id).get(component, [])
        if len(tasks) <= index:
            return None, f"kill of {component}:{index}: no live Python process of it"
        return tasks[index].pid, ""

    def _kill_supervisor(self, kill: Kill) -> None:
        if self.supervisors is None:
            msg = "--kill-supervisor needs the lab's Storm cluster (--lab)"
            raise StormRunError(msg)
        # the lab names its supervisors supervisor-1, supervisor-2, ...
        number = kill.index + 1
        self.supervisors.kill_supervisor(number)
        # restarting before the killed JVM is gone would find it "running"
        deadline = self.clock() + GONE_TIMEOUT_S
        while self.supervisors.supervisor_pid(number) is not None:
            if self.clock() > deadline:
                msg = f"--kill-supervisor {kill.index}: supervisor-{number} lives on"
                raise StormRunError(msg)
            time.sleep(POLL_S)  # no events from Nimbus or /proc: poll
        self.supervisors.restart_supervisor(number)

    def check_errors(self) -> None:
        """Raise when a task reported an error no restart cures (at most every 2 s).

        Raises:
            StormRunError: naming the first such error.
        """
        now = self.clock()
        if now - self.errors_checked_at < _ERROR_POLL_S:
            return
        self.errors_checked_at = now
        info = self.session.topology_info(self.topology_id)
        self._note_status(info, now)
        errors = errors_of(info, _FATAL)
        fatal = [e for e in errors if any(mark in e for mark in _FATAL)]
        # what tasks only log (a ring write refused) never reaches Nimbus
        self.logs.update(w.log for w in worker_processes(self.topology_id))
        fatal += logged_lines(sorted(self.logs), _FATAL)
        if fatal:
            msg = E_FATAL.format(name=self.topology.name, error=fatal[0])
            raise StormRunError(msg)

    def active(self) -> bool:
        """Whether Nimbus runs the topology ACTIVE now (asked afresh)."""
        now = self.clock()
        return self._note_status(self.session.topology_info(self.topology_id), now)

    def _note_status(self, info: Any, now: float) -> bool:
        active = str(getattr(info, "status", "ACTIVE")) == "ACTIVE"
        if not active:
            self.inactive_at = now
        return active

    def recovered(self) -> bool:
        """Whether every task or worker kill was followed by a rollback's RUNNING."""
        return all(
            self.monitor.rollback_after(at) is not None
            for kill, at in self.killed
            if kill.kind in ("task", "worker", "coordinator")
        )


def _sigkill(pid: int) -> None:
    import os  # noqa: PLC0415 (one use)
    import signal  # noqa: PLC0415 (one use)

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        logger.warning("pid %s was already gone", pid)
