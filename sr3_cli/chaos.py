"""Randomized failure campaigns: seeded fault schedules checked against a clean run.

A schedule is a list of faults at times into a run of a topology on the local
cluster (checkpoint mode ``local`` or ``native``), in a lab: SIGKILLed tasks,
SIGKILLed ring nodes started again later, ring nodes frozen with SIGSTOP, and
ZooKeeper stopped and started again. At most ``r - 1`` ring nodes are down or
frozen at any time. Every schedule's final committed state and last outputs
must equal those of a failure-free run of the same topology and conf. The same
seed gives the same schedules, so a failing one is replayed by its seed and
index (:func:`replay_command`).
"""

from __future__ import annotations

import json
import logging
import math
import random
import shlex
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

from sr3.config import Sr3Config
from sr3.errors import SR3Error
from sr3_cli.lab import Lab
from storm_bridge.runner import NodeKill, RunOptions, RunReport, TaskKill, run_topology
from storm_bridge.topology import LoadedTopology, load_topology
from storm_bridge.wiring import RingAccess

__all__ = [
    "Fault",
    "Outcome",
    "Schedule",
    "final_state",
    "generate",
    "recovery_times",
    "replay_command",
    "run_schedule",
    "summarize_recoveries",
]

logger = logging.getLogger(__name__)

FaultKind = Literal["kill-task", "kill-node", "freeze-node", "restart-zk"]
KINDS: Final[tuple[FaultKind, ...]] = (
    "kill-task",
    "kill-node",
    "freeze-node",
    "restart-zk",
)
MODES: Final = ("local", "native")
NODE_KINDS: Final = ("kill-node", "freeze-node")
#: Faults happen this long into a run at the latest (runs of the campaign's
#: topologies take a few seconds: later faults would often miss the data).
WINDOW_S: Final = 3.0


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule.

    Attributes:
        kind: What happens.
        at_s: Seconds into the run.
        target: ``component:index`` (kill-task), a node id (kill-node,
            freeze-node) or ``zookeeper``.
        down_s: How long a node stays dead or frozen, or ZooKeeper down.
    """

    kind: FaultKind
    at_s: float
    target: str
    down_s: float = 0.0

    def describe(self) -> str:
        """Return a short text such as ``kill-node node-2@1.2s for 2.0s``."""
        text = f"{self.kind} {self.target}@{self.at_s:g}s"
        return text + (f" for {self.down_s:g}s" if self.down_s else "")


@dataclass(frozen=True)
class Schedule:
    """The faults of one run, and the checkpoint mode it uses."""

    seed: int
    index: int
    mode: str
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        """Return the mode and every fault on one line."""
        faults = ", ".join(f.describe() for f in self.faults) or "no fault"
        return f"{self.mode}: {faults}"


@dataclass
class Outcome:
    """How one schedule went."""

    schedule: Schedule
    passed: bool
    seconds: float
    reason: str = ""
    report: RunReport | None = field(default=None, repr=False)


def generate(
    seed: int,
    count: int,
    *,
    topology: LoadedTopology,
    nodes: Sequence[str],
    replicas: int = 3,
    modes: Sequence[str] = MODES,
) -> list[Schedule]:
    """Return ``count`` schedules drawn from ``seed`` (the same seed, the same list).

    Node faults never leave more than ``replicas - 1`` nodes dead or frozen at
    once; a killed node comes back after its ``down_s``.
    """
    rng = random.Random(seed)
    tasks = [
        f"{name}:{index}"
        for name, comp in topology.components.items()
        for index in range(comp.tasks)
    ]
    schedules = []
    for index in range(count):
        faults: list[Fault] = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(KINDS)
            at_s = round(rng.uniform(0.3, WINDOW_S), 1)
            if kind == "kill-task":
                faults.append(Fault(kind, at_s, rng.choice(tasks)))
            elif kind == "restart-zk":
                fault = Fault(kind, at_s, "zookeeper", round(rng.uniform(0.3, 2), 1))
                if not any(_overlap(f, fault) for f in faults if f.kind == kind):
                    faults.append(fault)
            else:
                down_s = round(rng.uniform(1.0, 4.0), 1)
                node = rng.choice(list(nodes))
                fault = Fault(kind, at_s, node, down_s)
                if _node_budget_ok(faults, fault, replicas):
                    faults.append(fault)
        faults.sort(key=lambda f: f.at_s)
        schedules.append(Schedule(seed, index, rng.choice(list(modes)), tuple(faults)))
    return schedules


def _node_budget_ok(faults: Sequence[Fault], new: Fault, replicas: int) -> bool:
    """Whether ``new`` keeps at most ``replicas - 1`` nodes down at once."""
    node_faults = [f for f in faults if f.kind in NODE_KINDS]
    if any(f.target == new.target for f in node_faults):
        return False  # one fault per node and schedule keeps replays simple
    overlapping = [f for f in node_faults if _overlap(f, new)]
    return len(overlapping) + 1 <= replicas - 1


def _overlap(one: Fault, other: Fault) -> bool:
    return one.at_s < other.at_s + other.down_s and other.at_s < one.at_s + one.down_s


def replay_command(
    schedule: Schedule, topology: Path, conf: Mapping[str, Any] | None = None
) -> str:
    """Return the command that runs ``schedule`` again (with the campaign's conf)."""
    options = "".join(
        f" -o {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in (conf or {}).items()
    )
    return (
        f"sr3 chaos --topology {shlex.quote(str(topology))} --seed {schedule.seed} "
        f"--schedules {schedule.index + 1} --only {schedule.index}{options}"
    )


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


class _Injector:
    """Runs a schedule's node freezes and ZooKeeper restarts, and restarts nodes.

    Each action runs on a thread of its own with the lab read afresh, as a user
    typing ``sr3 lab ...`` in another shell would: a node restart waiting for a
    ZooKeeper that is down must not hold back the command that starts it again.
    """

    def __init__(self, lab: Lab, faults: Sequence[Fault]) -> None:
        self._root = lab.root
        self._faults = [f for f in faults if f.kind != "kill-task"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._actions: list[threading.Thread] = []
        self._started = 0.0
        self._finished = False
        self.errors: list[str] = []

    def start(self) -> None:
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
        self._thread.join(timeout_s)
        for thread in self._actions:
            thread.join(timeout_s)
        lab = Lab.load(self._root)
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
) -> Outcome:
    """Run ``schedule`` on the topology at ``path`` and compare with ``expected``.

    Args:
        lab: A running lab whose nodes and ZooKeeper the faults hit.
        path: The topology file.
        schedule: The faults.
        conf: Storm conf of the run (the schedule's mode is added).
        expected: :func:`final_state` of a failure-free run.
        expected_outputs: Its report's ``outputs`` (None: not compared).
        timeout_s: Bound of the run.
    """
    topology = load_topology(path)
    kills = [
        TaskKill(f.target.split(":")[0], int(f.target.split(":")[1]), f.at_s)
        for f in schedule.faults
        if f.kind == "kill-task"
    ]
    node_kills = [
        NodeKill(f.target, f.at_s) for f in schedule.faults if f.kind == "kill-node"
    ]
    options = RunOptions(
        until_idle=True,
        kills=kills,
        node_kills=node_kills,
        conf={**conf, "sr3.checkpoint.mode": schedule.mode},
        timeout_s=timeout_s,
    )
    injector = _Injector(lab, schedule.faults)
    started = time.monotonic()
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        injector.start()
        report = run_topology(
            path, ring=ring, options=options, kill_node=injector.kill_node
        )
        injector.finish(timeout_s)
        state = final_state(ring, topology)
    finally:
        injector.finish(timeout_s)
        ring.close()
    seconds = time.monotonic() - started
    reason = _difference(report, state, expected, expected_outputs, injector.errors)
    return Outcome(schedule, not reason, seconds, reason, report)


def _difference(
    report: RunReport,
    state: Mapping[str, Any],
    expected: Mapping[str, Any],
    expected_outputs: Mapping[str, Any] | None,
    errors: Sequence[str],
) -> str:
    if errors:
        return "the schedule could not be applied: " + "; ".join(errors)
    if not report.idle:
        return f"the run did not end idle: {report.busy}"
    for component, keys in expected.items():
        got = state.get(component, {})
        if got != keys:
            wrong = sorted(
                (k for k in set(got) | set(keys) if got.get(k) != keys.get(k)), key=repr
            )
            first = wrong[0]
            return (
                f"{component}: {len(wrong)} keys differ, first {first!r}: "
                f"{got.get(first)!r} instead of {keys.get(first)!r}"
            )
    if expected_outputs is not None and dict(report.outputs) != dict(expected_outputs):
        return "the last outputs differ from the failure-free run's"
    return ""


def recovery_times(outcomes: Sequence[Outcome]) -> dict[str, list[float]]:
    """Return each failure kind's recovery times over ``outcomes``, in seconds.

    A recovery is one rollback of a run: from the failure (the kill, when the
    run made it) to the first epoch committed after it, the report's
    ``detect_s + restore_s + replay_s``. Its kind is the fault of its first
    cause: ``kill-task`` for a killed task, ``kill-node`` or ``freeze-node`` for
    a ring node that left the ring; rollbacks with any other cause (a task that
    died of a ZooKeeper restart, say) count under ``other``. Rollbacks that
    never resumed are left out.
    """
    times: dict[str, list[float]] = {}
    for outcome in outcomes:
        report = outcome.report
        if report is None:
            continue
        for entry in report.recoveries:
            timeline = entry.get("timeline") or {}
            phases = [timeline.get(k) for k in ("detect_s", "restore_s", "replay_s")]
            if any(p is None for p in phases):
                continue
            seconds = sum(float(p) for p in phases if p is not None)
            times.setdefault(_cause_kind(outcome.schedule, entry), []).append(seconds)
    return times


def _cause_kind(schedule: Schedule, entry: Mapping[str, Any]) -> str:
    first = str(entry.get("cause", "")).split(",")[0].strip()
    for fault in schedule.faults:
        if fault.kind == "kill-task" and first == fault.target:
            return "kill-task"
        if fault.kind in NODE_KINDS and first == f"ring node {fault.target}":
            return fault.kind
    return "other"


def summarize_recoveries(
    times: Mapping[str, Sequence[float]],
) -> dict[str, dict[str, float | int]]:
    """Return ``{kind: {"count", "p50_s", "p99_s", "max_s"}}`` of recovery times."""
    summary: dict[str, dict[str, float | int]] = {}
    for kind, values in sorted(times.items()):
        ordered = sorted(values)
        summary[kind] = {
            "count": len(ordered),
            "p50_s": round(_percentile(ordered, 0.50), 3),
            "p99_s": round(_percentile(ordered, 0.99), 3),
            "max_s": round(ordered[-1], 3),
        }
    return summary


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of a sorted, non-empty sequence."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
