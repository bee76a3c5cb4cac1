"""Running a chaos schedule: its faults injected into a run, the result compared.

:func:`run_schedule` runs one :class:`~sr3_cli.chaos.Schedule` of a campaign
against a lab, on the Storm engine's local cluster or on Spark (on Apache
Storm: :mod:`sr3_cli.chaos_storm`), and says
whether its final committed state (and last outputs) equal a failure-free
run's (:func:`final_state`).
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sr3.config import Sr3Config
from sr3.errors import ConfigError, SR3Error
from sr3_cli.chaos import (
    NETNS_KINDS,
    RUN_KINDS,
    SPARK,
    SPARK_ROWS,
    Fault,
    Outcome,
    Schedule,
)
from sr3_cli.chaos_compare import Comparison, state_difference
from sr3_cli.chaos_netns import end_netns_faults, netns_events
from sr3_cli.lab import Lab
from storm_bridge.runner import (
    NodeKill,
    RunOptions,
    RunReport,
    TaskFreeze,
    TaskKill,
    run_topology,
)
from storm_bridge.wiring import RingAccess
from topology_api.topology import LoadedTopology, load_topology

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Injector", "final_state", "run_schedule", "verdict"]


def final_state(
    ring: RingAccess, topology: LoadedTopology
) -> dict[str, dict[tuple[Any, ...], Any]]:
    """Return the committed state of every stateful bolt, by component."""
    state: dict[str, dict[tuple[Any, ...], Any]] = {}
    for name, comp in topology.components.items():
        if comp.kind == "bolt" and comp.stateful:
            _epoch, keyed = ring.committed_state(topology.name, name)
            state[name] = {tuple(k): _plain(v) for k, v in keyed.items()}
    return state


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Injector:
    """Runs a schedule's node freezes and ZooKeeper restarts, and restarts nodes.

    Each action runs on a thread of its own with the lab read afresh, as a user
    typing ``sr3 lab ...`` in another shell would: a node restart waiting for a
    ZooKeeper that is down must not hold back the command that starts it again.
    """

    def __init__(
        self, lab: Lab, faults: Sequence[Fault], *, kills_nodes: bool = False
    ) -> None:
        self._root = lab.root
        self._faults = [f for f in faults if f.kind not in RUN_KINDS]
        restarts = [f for f in self._faults if f.kind == "restart-zk"]
        if restarts and lab.zk_external:
            msg = (
                f"the schedule restarts ZooKeeper ({restarts[0].describe()}) but "
                f"the lab in {lab.root} uses the external ZooKeeper at "
                f"{lab.zk_external}, which it does not stop: run the campaign "
                "on a lab with its own ZooKeeper (`sr3 lab up` without --zk)"
            )
            raise ConfigError(msg)
        #: Kill the nodes too (the Spark runner has no node-kill hook).
        self._kills_nodes = kills_nodes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._actions: list[threading.Thread] = []
        self._started = 0.0
        self._finished = False
        self.errors: list[str] = []

    def start(self) -> None:
        """Start the schedule's timeline: its faults' ``at_s`` count from now."""
        self._started = time.monotonic()
        self._thread.start()

    def kill_node(self, node: str) -> None:
        """The run's ``kill_node`` hook: SIGKILL (the restart is an event)."""
        Lab.load(self._root).kill_nodes([node])

    def _events(self) -> list[tuple[float, Callable[[Lab], object], str]]:
        events: list[tuple[float, Callable[[Lab], object], str]] = []
        for fault in self._faults:
            end = fault.at_s + fault.down_s
            node = [fault.target]
            if fault.kind == "kill-node":
                start = partial(Lab.start_nodes, node_ids=node)
                events.append((end, start, fault.describe()))
                if self._kills_nodes:
                    kill = partial(Lab.kill_nodes, node_ids=node)
                    events.append((fault.at_s, kill, fault.describe()))
            elif fault.kind in NETNS_KINDS:
                events += netns_events(fault)
            elif fault.kind == "freeze-node":
                freeze = partial(Lab.kill_nodes, node_ids=node, sig=signal.SIGSTOP)
                thaw = partial(Lab.kill_nodes, node_ids=node, sig=signal.SIGCONT)
                events += [(fault.at_s, freeze, fault.describe()), (end, thaw, "thaw")]
            else:
                events += [
                    (fault.at_s, Lab.stop_zookeeper, fault.describe()),
                    (end, Lab.start_zookeeper, "start zookeeper"),
                ]
        return sorted(events, key=lambda e: e[0])

    def _loop(self) -> None:
        for at_s, action, what in self._events():
            delay = self._started + at_s - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            thread = threading.Thread(
                target=self._act, args=(action, what), daemon=True
            )
            self._actions.append(thread)
            thread.start()

    def _act(self, action: Callable[[Lab], object], what: str) -> None:
        try:
            action(Lab.load(self._root))
        except (OSError, SR3Error) as exc:
            self.errors.append(f"{what}: {exc}")

    def finish(self, timeout_s: float) -> None:
        """Run what is left of the schedule (restarts, thaws) at once, then wait."""
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        if self._started:  # a run on Storm that never started never started it
            self._thread.join(timeout_s)
        for thread in self._actions:
            thread.join(timeout_s)
        lab = Lab.load(self._root)
        if any(f.kind in NETNS_KINDS for f in self._faults):
            end_netns_faults(lab)
        if not lab.zookeeper_running:
            lab.start_zookeeper()
        for fault in self._faults:
            if fault.kind == "freeze-node":
                lab.kill_nodes([fault.target], sig=signal.SIGCONT)
        down = [n for n, node in lab.nodes.items() if not node.alive]
        if down:
            lab.start_nodes(sorted(down))


def run_schedule(
    lab: Lab,
    path: Path,
    schedule: Schedule,
    *,
    conf: Mapping[str, Any],
    expected: Mapping[str, Any],
    expected_outputs: Mapping[str, Any] | None = None,
    timeout_s: float = 120.0,
    spark: SparkSession | None = None,
    comparison: Comparison | None = None,
) -> Outcome:
    """Run ``schedule`` on the topology at ``path`` and compare with ``expected``.

    A ``spark`` schedule runs on the Spark engine, in ``spark`` (a session of
    its own when None), and is compared on its committed state only: Spark's
    report has no last outputs in the Storm engine's shape.

    Args:
        lab: A running lab whose nodes and ZooKeeper the faults hit.
        path: The topology file.
        schedule: The faults.
        conf: Storm conf of the run (the schedule's mode is added).
        expected: :func:`final_state` of a failure-free run.
        expected_outputs: Its report's ``outputs`` (None: not compared).
        timeout_s: Bound of the run.
        spark: The Spark session of ``spark`` schedules.
        comparison: How the end is compared (None: exactly;
            :mod:`sr3_cli.chaos_compare`).
    """
    if schedule.mode == SPARK:
        return _run_spark_schedule(
            lab,
            path,
            schedule,
            conf=conf,
            expected=expected,
            timeout_s=timeout_s,
            spark=spark,
            comparison=comparison,
        )
    topology = load_topology(path)
    kills = [
        TaskKill(*_task(f.target), f.at_s)
        for f in schedule.faults
        if f.kind == "kill-task"
    ]
    node_kills = [
        NodeKill(f.target, f.at_s) for f in schedule.faults if f.kind == "kill-node"
    ]
    freezes = [
        TaskFreeze(*_task(f.target), f.at_s, f.down_s)
        for f in schedule.faults
        if f.kind == "freeze-task"
    ]
    options = RunOptions(
        until_idle=True,
        kills=kills,
        node_kills=node_kills,
        freezes=freezes,
        conf={**conf, "sr3.checkpoint.mode": schedule.mode},
        timeout_s=timeout_s,
    )
    injector = Injector(lab, schedule.faults)
    started = time.monotonic()
    ring: RingAccess | None = None
    try:
        ring = RingAccess(lab.config(Sr3Config()))
        injector.start()
        report = run_topology(
            path, ring=ring, options=options, kill_node=injector.kill_node
        )
        injector.finish(timeout_s)
        state = final_state(ring, topology)
    except SR3Error as exc:
        # a run (or the lab) that gives up on ZooKeeper fails its schedule, with
        # the error as the reason; the campaign goes on with the next one
        seconds = time.monotonic() - started
        reason = f"the run raised {type(exc).__name__}: {exc}"
        return Outcome(schedule, False, seconds, reason, None)
    finally:
        injector.finish(timeout_s)
        if ring is not None:
            ring.close()
    seconds = time.monotonic() - started
    reason = verdict(
        report, state, expected, expected_outputs, injector.errors, comparison
    )
    return Outcome(schedule, not reason, seconds, reason, report)


def verdict(
    report: RunReport,
    state: Mapping[str, Any],
    expected: Mapping[str, Any],
    expected_outputs: Mapping[str, Any] | None,
    errors: Sequence[str],
    comparison: Comparison | None = None,
) -> str:
    """Why a schedule failed (``""``: it passed), on any engine.

    Its faults not applied, a run not idle, state unlike ``expected``, or (with
    ``expected_outputs``) last outputs unlike the failure-free run's.
    """
    if errors:
        return "the schedule could not be applied: " + "; ".join(errors)
    if not report.idle:
        return f"the run did not end idle: {report.busy}"
    comparison = comparison or Comparison()
    difference = state_difference(state, expected, comparison)
    if difference:
        return difference
    if not comparison.outputs or expected_outputs is None:
        return ""
    if not comparison.same(dict(report.outputs), dict(expected_outputs)):
        return "the last outputs differ from the failure-free run's"
    return ""


def _run_spark_schedule(  # noqa: PLR0913 (run_schedule's options)
    lab: Lab,
    path: Path,
    schedule: Schedule,
    *,
    conf: Mapping[str, Any],
    expected: Mapping[str, Any],
    timeout_s: float,
    spark: SparkSession | None,
    comparison: Comparison | None,
) -> Outcome:
    """Run a ``spark`` schedule: its faults against a Spark engine run."""
    # pyspark loads only when a campaign has Spark schedules
    from spark_bridge.runner import run_topology as run_spark  # noqa: PLC0415

    topology = load_topology(path)
    injector = Injector(lab, schedule.faults, kills_nodes=True)
    started = time.monotonic()
    ring = RingAccess(lab.config(Sr3Config()))
    errors: list[str] = []
    state: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="sr3-chaos-spark-") as tmp:
            injector.start()
            try:
                report = run_spark(
                    path,
                    checkpoint_dir=tmp,
                    spark=spark,
                    ring=ring,
                    conf=conf,
                    max_rows_per_batch=SPARK_ROWS,
                    duration_s=timeout_s,
                )
            except SR3Error as exc:
                errors.append(f"the Spark run failed: {exc}")
                report = {}
            injector.finish(timeout_s)
            if not errors:
                state = final_state(ring, topology)
    finally:
        injector.finish(timeout_s)
        ring.close()
    seconds = time.monotonic() - started
    reason = "; ".join(errors + injector.errors)
    if not reason and not report.get("idle", True):
        reason = f"the run did not end idle: {report.get('busy')}"
    if not reason:
        reason = state_difference(state, expected, comparison)
    return Outcome(schedule, not reason, seconds, reason)


def _task(target: str) -> tuple[str, int]:
    component, index = target.rsplit(":", 1)
    return component, int(index)
