"""``LocalCluster``: run a streamparse topology on local multilang subprocesses.

Lifecycle::

    NEW --start()--> RUNNING --stop()--> STOPPED

Any other call order raises :class:`ClusterStateError`. A background thread owns
the engine; the public methods take the same lock, so they can be called from any
thread, and :meth:`LocalCluster.wait_for` wakes on every change instead of polling.
What it shows of its engine (counters, events, failures, outputs) is its base
:class:`~storm_bridge.cluster.view.ClusterView`'s.
"""

from __future__ import annotations

import enum
import logging
import os
import queue
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.engine import Engine
from storm_bridge.cluster.health import settled
from storm_bridge.cluster.process import ProcessEvent
from storm_bridge.cluster.rebalance import Rebalancer
from storm_bridge.cluster.settings import ClusterOptions
from storm_bridge.cluster.view import ClusterView
from storm_bridge.errors import ClusterStateError, StormBridgeError
from storm_bridge.multilang import get_serializer
from topology_api.topology import LoadedTopology, load_topology

__all__ = ["ClusterState", "LocalCluster"]

logger = logging.getLogger(__name__)

_MAX_IDLE_WAIT_S: Final = 1.0
_DRAIN_BATCH: Final = 1000


class ClusterState(enum.Enum):
    """Lifecycle of a :class:`LocalCluster` (see the module docstring)."""

    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


def _subprocess_env(
    topology: LoadedTopology, extra: Mapping[str, str]
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    paths = list(topology.sys_paths)
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


class LocalCluster(ClusterView):
    """A local stand-in for a Storm cluster running one multilang topology.

    Every task is a ``streamparse_run module.Class`` subprocess talking the
    multilang protocol, driven as Storm's ShellBolt and ShellSpout drive them.

    Args:
        topology: A loaded topology, or the path of a topology file.
        conf: Storm conf overriding the topology's ``config`` (``sparse -o``).
        serializer: ``json`` (Storm's default) or ``msgpack``.
        options: Local-cluster knobs (restart backoff, strictness...).
        env: Extra environment variables of the subprocesses.
        bin_dir: Directory of ``streamparse_run``; defaults to this interpreter's.
        seed: Seed of tuple ids and shuffles (random when None).
        clock: Monotonic clock in seconds.
        checkpoint: Global checkpoints with exactly-once rollback (None: off).

    Raises:
        TopologyError: the topology file cannot be loaded, its conf is invalid,
            or it uses what the local cluster cannot run (a Java custom
            grouping, a stateful bolt without a key).
        ConfigError: a sink's ``sr3.output.key.fields`` is invalid.
        ValueError: the serializer is unknown.
    """

    def __init__(
        self,
        topology: LoadedTopology | str | Path,
        conf: Mapping[str, Any] | None = None,
        *,
        serializer: str = "json",
        options: ClusterOptions | None = None,
        env: Mapping[str, str] | None = None,
        bin_dir: Path | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        checkpoint: CheckpointSettings | None = None,
    ) -> None:
        loaded = (
            topology
            if isinstance(topology, LoadedTopology)
            else load_topology(topology)
        )
        self.topology = loaded
        self._work_dir = Path(tempfile.mkdtemp(prefix=f"storm-{loaded.name}-"))
        self._inbox: queue.SimpleQueue[ProcessEvent | None] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._state = ClusterState.NEW
        self._thread: threading.Thread | None = None
        self._crash: BaseException | None = None
        self._give_up_on_never_up = False
        self._clock = clock
        try:
            self._engine = Engine(
                loaded,
                conf or {},
                serializer=get_serializer(serializer),
                bin_dir=bin_dir or Path(sys.executable).parent,
                work_dir=self._work_dir,
                env=_subprocess_env(loaded, env or {}),
                rng=random.Random(seed),  # noqa: S311 (ids, not secrets)
                clock=clock,
                options=options or ClusterOptions(),
                sink=self._inbox.put,
                checkpoint=checkpoint,
            )
        except BaseException:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            raise
        self._rebalancer = (
            None if checkpoint is None else Rebalancer(self._engine, clock)
        )

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        """The lifecycle state."""
        return self._state

    def _move(self, expected: ClusterState, new: ClusterState) -> None:
        if self._state is not expected:
            msg = (
                f"local cluster of {self.topology.name!r} is {self._state.value}, "
                f"not {expected.value}"
            )
            raise ClusterStateError(msg)
        self._state = new

    def start(self, timeout_s: float = 60.0) -> None:
        """Spawn every task and wait until all have shaken hands and spouts are active.

        After :meth:`give_up_on_tasks_never_up` it also returns, with the
        cluster running, once a task cannot come up (its ``initialize`` raised
        every time): the caller reports the task's exception.

        Raises:
            ClusterStateError: the cluster was already started.
            StormBridgeError: not every task was ready within ``timeout_s`` (the
                cluster is then stopped; its event log tells why).
        """
        with self._lock:
            self._move(ClusterState.NEW, ClusterState.RUNNING)
            self._engine.start()
        self._thread = threading.Thread(
            target=self._loop, name=f"storm-{self.topology.name}", daemon=True
        )
        self._thread.start()
        if not self._wait(lambda: self._engine.active, timeout_s):
            if self._give_up_on_never_up and self.cannot_come_up():
                # the caller asked (give_up_on_tasks_never_up) to end on a task
                # whose initialize raises every time: its run reports the
                # exception instead of a start timeout
                return
            with self._lock:
                waiting = [
                    f"{rt.component.name}:{rt.task_id}"
                    for rt in self._engine.tasks.values()
                    if rt.pid is None
                ]
                errors = self._engine.journal.errors
                last = f"; last error: {errors[-1]}" if errors else ""
            self.stop()
            msg = (
                f"tasks {waiting} of {self.topology.name!r} not ready within "
                f"{timeout_s} s{last}; the cluster was stopped"
            )
            raise StormBridgeError(msg)

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop every subprocess (stdin closed, then SIGKILL after ``grace_s``).

        Idempotent once started; a cluster never started just becomes STOPPED.
        """
        with self._lock:
            if self._state is ClusterState.STOPPED:
                return
            self._state = ClusterState.STOPPED
            self._engine.stop(grace_s)
            self._changed.notify_all()
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(grace_s + 5.0)
        shutil.rmtree(self._work_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._running():
                        return
                    deadline = self._run_timers()
                wait_s = (
                    _MAX_IDLE_WAIT_S if deadline is None else deadline - self._clock()
                )
                try:
                    event = self._inbox.get(
                        timeout=min(max(wait_s, 0.0), _MAX_IDLE_WAIT_S)
                    )
                except queue.Empty:
                    event = None
                with self._lock:
                    if not self._running():
                        return
                    for _ in range(_DRAIN_BATCH):
                        if event is not None:
                            self._engine.handle(event)
                        try:
                            event = self._inbox.get_nowait()
                        except queue.Empty:
                            break
                    else:
                        if event is not None:
                            self._engine.handle(event)
                    self._run_timers()
                    self._changed.notify_all()
        except BaseException as exc:  # the cluster is unusable: tell the waiters why
            logger.exception("local cluster of %s crashed", self.topology.name)
            with self._lock:
                self._crash = exc
                self._changed.notify_all()
            raise

    def _running(self) -> bool:
        return self._state is ClusterState.RUNNING

    def _run_timers(self) -> float | None:
        for callback in self._engine.timers.pop_due(self._clock()):
            callback()
        return self._engine.timers.next_deadline()

    # -- control -----------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._crash is not None:
            msg = f"local cluster of {self.topology.name!r} crashed: {self._crash!r}"
            raise ClusterStateError(msg) from self._crash
        if self._state is not ClusterState.RUNNING:
            state = self._state.value
            msg = f"local cluster of {self.topology.name!r} is {state}, not running"
            raise ClusterStateError(msg)

    def activate(self) -> None:
        """Activate the topology (spouts get ``activate``, then ``next`` calls)."""
        with self._lock:
            self._check_running()
            self._engine.activate()

    def deactivate(self) -> None:
        """Deactivate the topology (spouts get ``deactivate``, no more ``next``)."""
        with self._lock:
            self._check_running()
            self._engine.deactivate()

    def kill_task(self, task_id: int) -> None:
        """SIGKILL a task's subprocess, as a crash would; the cluster restarts it."""
        with self._lock:
            self._check_running()
            self._engine.kill_task(task_id)

    def rollback(self, cause: str) -> None:
        """Roll the topology back to its last committed epoch (checkpointing only)."""
        with self._lock:
            self._check_running()
            self._engine.rollback(cause)

    def ring_node_left(self, node: str) -> None:
        """A ring node left: roll back, or under task scope abandon the open epoch."""
        with self._lock:
            self._check_running()
            self._engine.ring_node_left(node)

    def request_epoch(self) -> int | None:
        """Open an epoch as soon as possible; return the number it will get."""
        with self._lock:
            coordinator = self._engine.coordinator
            if coordinator is None:
                return None
            upcoming = coordinator.next_epoch
            if coordinator.open_epoch():
                # without stateful bolts and replayable spouts an epoch may
                # commit at once, before open_epoch returns
                return upcoming
            current = coordinator.in_flight
            return None if current is None else current + 1

    def wait_for(
        self, predicate: Callable[[LocalCluster], bool], timeout_s: float
    ) -> bool:
        """Wait until ``predicate(self)`` holds, re-checking after every change.

        Returns:
            Whether it held before ``timeout_s`` elapsed.

        Raises:
            ClusterStateError: the cluster crashed or is not running.
        """
        return self._wait(lambda: predicate(self), timeout_s)

    def give_up_on_tasks_never_up(self) -> None:
        """Make waits end (False) once a task cannot come up.

        That is a task whose last subprocesses all died in ``initialize``
        (:func:`~storm_bridge.cluster.health.never_up`): waiting for the
        topology to go idle would only restart it until the deadline.
        """
        with self._lock:
            self._give_up_on_never_up = True
            self._changed.notify_all()

    def _wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                self._check_running()
                if predicate():
                    return True
                if self._give_up_on_never_up and self._never_up():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)

    def run_until_idle(self, timeout_s: float, *, empty_nexts: int = 5) -> bool:
        """Run until the spouts run dry and no tuple is pending anywhere.

        Dry means ``empty_nexts`` ``next`` calls in a row emitted nothing, over
        at least the spout's ``sr3.idle.quiet.s`` (default 2 s): a spout that
        waits on its source for a while is not at its end.

        Returns:
            Whether the topology went idle before ``timeout_s`` elapsed.

        Raises:
            ClusterStateError: the cluster crashed or is not running.
        """
        return self._wait(lambda: self._engine.is_idle(empty_nexts), timeout_s)

    def wait_settled(self, timeout_s: float) -> bool:
        """Wait until every task that died on its own came back or crash-loops.

        A task restarted after its own death near the end of a run gets that
        long to come up (its ``initialize`` to return) before it counts as down.

        Returns:
            Whether they all settled within ``timeout_s``.

        Raises:
            ClusterStateError: the cluster crashed or is not running.
        """
        return self._wait(lambda: settled(self._engine.tasks.values()), timeout_s)
