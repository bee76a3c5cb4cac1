"""Randomized failure campaigns: seeded fault schedules and what their runs show.

A schedule is a list of faults at times into a run of a topology on the local
cluster (checkpoint mode ``local`` or ``native``) or on Spark, in a lab:
SIGKILLed tasks, SIGKILLed ring nodes started again later, ring nodes frozen
with SIGSTOP, and ZooKeeper stopped and started again; in a network-namespace
lab also a ring node's host cut off and every link slowed (:data:`NETNS_KINDS`).
At most ``r - 1`` ring nodes are down, frozen or cut off at any time. Every
schedule's final committed state (and, on the Storm engine, last outputs) must
equal those of a failure-free run of the same topology and conf
(:mod:`sr3_cli.chaos_runs` runs them). The same seed gives the same schedules,
so a failing one is replayed by its seed and index (:func:`replay_command`).
"""

from __future__ import annotations

import json
import math
import random
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from sr3.errors import ConfigError

if TYPE_CHECKING:  # annotations only: `sr3 chaos --help` loads no engine
    from storm_bridge.report import RunReport
    from topology_api.topology import LoadedTopology

__all__ = [
    "APACHE_STORM",
    "APACHE_STORM_KINDS",
    "NETNS_KINDS",
    "SPARK_STANDALONE",
    "SPARK_STANDALONE_KINDS",
    "Fault",
    "Outcome",
    "Schedule",
    "drawn_kinds",
    "generate",
    "recovery_times",
    "replay_command",
    "summarize_recoveries",
]


FaultKind = Literal[
    "kill-task",
    "freeze-task",
    "kill-node",
    "freeze-node",
    "restart-zk",
    "partition-node",
    "netem-slow",
    "kill-worker",
    "kill-coordinator",
    "kill-executor",
    "kill-driver",
]
KINDS: Final[tuple[FaultKind, ...]] = (
    "kill-task",
    "kill-node",
    "freeze-node",
    "restart-zk",
    "freeze-task",
)
#: Faults of a task (``component:index``), injected by the run itself.
TASK_KINDS: Final = ("kill-task", "freeze-task")
#: Faults every run injects itself (the others are the lab's, on a timeline).
RUN_KINDS: Final = (
    *TASK_KINDS,
    "kill-worker",
    "kill-coordinator",
    "kill-executor",
    "kill-driver",
)
MODES: Final = ("local", "native")
#: The Spark engine's schedules: a mode of their own, without task kills (a
#: Spark task is not a process the campaign can kill in local mode).
SPARK: Final = "spark"
SPARK_KINDS: Final[tuple[FaultKind, ...]] = ("kill-node", "freeze-node", "restart-zk")
#: Spark micro-batches of this many spout rows: a run spans many batches, and
#: the faults land while it commits them.
SPARK_ROWS: Final = 150
NODE_KINDS: Final = ("kill-node", "freeze-node")
#: Schedules on a real Apache Storm cluster (``sr3 chaos --engine
#: apache-storm``; checkpoints are always ``native`` there): a mode of its own,
#: so the other modes draw as they did. A worker JVM SIGKILLed (``kill-worker``,
#: its index by slot port) and the native coordinator's process SIGKILLed
#: (``kill-coordinator``: spout task 0 holding the coordinator znode) besides
#: task and ring-node kills. No ``restart-zk``: the lab's Storm cluster keeps
#: its state in the ring's ZooKeeper, so a restart would hit Nimbus and the
#: supervisors too, not the ring alone. No freezes: a frozen task's trees only
#: time out, as a killed one's do.
APACHE_STORM: Final = "apache-storm"
APACHE_STORM_KINDS: Final[tuple[FaultKind, ...]] = (
    "kill-task",
    "kill-worker",
    "kill-coordinator",
    "kill-node",
)
#: Schedules on a Spark standalone cluster (``sr3 chaos --engine
#: spark-standalone``), each run by a driver process of its own: a mode of its
#: own, so the other modes draw as they did. One of the application's executor
#: JVMs SIGKILLed (``kill-executor``: the worker launches a new one, Spark runs
#: the lost tasks again from its state store), the driver SIGKILLed
#: (``kill-driver``, at most one per schedule: a new driver resumes from the
#: ring with ``--resume`` and a fresh Spark checkpoint) and ring nodes killed.
#: No freezes or ZooKeeper restarts: the ``spark`` (``local[2]``) schedules
#: draw them against the same driver code, and this mode is about the
#: cluster's processes.
SPARK_STANDALONE: Final = "spark-standalone"
SPARK_STANDALONE_KINDS: Final[tuple[FaultKind, ...]] = (
    "kill-executor",
    "kill-driver",
    "kill-node",
)
#: The targets of ``kill-executor`` (the application's executor with the
#: lowest id at the kill) and ``kill-driver`` faults.
EXECUTOR: Final = "executor"
DRIVER: Final = "driver"
#: The target of a ``kill-coordinator`` fault (its process is found at the kill).
COORDINATOR: Final = "coordinator"
#: Faults of a network-namespace lab (``sr3 chaos --netns-faults``), drawn only
#: there, so the draws of every other campaign stay as they were: a ring node's
#: host cut off from every other host and the CLI, and every host's link slowed
#: to :data:`SLOW_LINK`, each for ``down_s``.
NETNS_KINDS: Final[tuple[FaultKind, ...]] = ("partition-node", "netem-slow")
#: What ``netem-slow`` shapes every host's link to: 2 Mbit/s, 50 ms each way and
#: 1 % loss per link, so host to host 100 ms one way and about 2 % loss (rate by
#: tbf, delay and loss by netfilter: no netem module needed, see sr3_cli.netns).
SLOW_LINK: Final = "rate=2mbit,delay=50ms,loss=1%"
#: Node faults that count against the ``r - 1`` nodes out at once.
_BUDGET_KINDS: Final = (*NODE_KINDS, "partition-node")
#: Faults happen this long into a run at the latest (runs of the campaign's
#: topologies take a few seconds: later faults would often miss the data).
WINDOW_S: Final = 3.0


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule.

    Attributes:
        kind: What happens.
        at_s: Seconds into the run.
        target: ``component:index`` (kill-task, freeze-task), a node id
            (kill-node, freeze-node) or ``zookeeper``.
        down_s: How long a task stays frozen (SIGSTOP until SIGCONT), a node
            dead or frozen, or ZooKeeper down.
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
    netns: bool = False,
    kinds: Sequence[str] | None = None,
) -> list[Schedule]:
    """Return ``count`` schedules drawn from ``seed`` (the same seed, the same list).

    Node faults never leave more than ``replicas - 1`` nodes dead or frozen at
    once; a killed node comes back after its ``down_s``. With ``spark`` among
    ``modes`` each schedule's mode is drawn first, and Spark's schedules draw
    no task kills; without it, the draws are those of the Storm-only campaign.
    With ``netns`` the kinds of :data:`NETNS_KINDS` are drawn too. With
    ``modes`` of :data:`APACHE_STORM` alone the kinds are
    :data:`APACHE_STORM_KINDS`, of :data:`SPARK_STANDALONE` alone
    :data:`SPARK_STANDALONE_KINDS`. ``kinds`` (None: all) keeps only those of a
    mode's kinds (:func:`drawn_kinds`).
    """
    rng = random.Random(seed)
    tasks = [
        f"{name}:{index}"
        for name, comp in topology.components.items()
        for index in range(comp.tasks)
    ]
    schedules = []
    with_spark = SPARK in modes
    workers = int(topology.config.get("topology.workers", 1))
    for index in range(count):
        mode = rng.choice(list(modes)) if with_spark else ""
        drawn = drawn_kinds(mode or modes[0], netns=netns, only=kinds)
        faults: list[Fault] = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(drawn)
            at_s = round(rng.uniform(0.3, WINDOW_S), 1)
            if kind == "kill-task":
                faults.append(Fault(kind, at_s, rng.choice(tasks)))
            elif kind == "kill-worker":
                faults.append(Fault(kind, at_s, str(rng.randrange(workers))))
            elif kind == "kill-coordinator":
                faults.append(Fault(kind, at_s, COORDINATOR))
            elif kind == "kill-executor":
                faults.append(Fault(kind, at_s, EXECUTOR))
            elif kind == "kill-driver":
                if not any(f.kind == kind for f in faults):
                    faults.append(Fault(kind, at_s, DRIVER))
            elif kind == "freeze-task":
                down_s = round(rng.uniform(1.0, 4.0), 1)
                faults.append(Fault(kind, at_s, rng.choice(tasks), down_s))
            elif kind == "netem-slow":
                fault = Fault(kind, at_s, SLOW_LINK, round(rng.uniform(1.0, 4.0), 1))
                if not any(_overlap(f, fault) for f in faults if f.kind == kind):
                    faults.append(fault)
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
        mode = mode or rng.choice(list(modes))
        schedules.append(Schedule(seed, index, mode, tuple(faults)))
    return schedules


def drawn_kinds(
    mode: str, *, netns: bool = False, only: Sequence[str] | None = None
) -> tuple[FaultKind, ...]:
    """Return the fault kinds a schedule of ``mode`` draws from, in draw order.

    ``only`` (None: all) keeps those among them.

    Raises:
        ConfigError: none of ``only`` is drawn in ``mode``.
    """
    if mode == APACHE_STORM:
        kinds = (*APACHE_STORM_KINDS, *NETNS_KINDS) if netns else APACHE_STORM_KINDS
    elif mode == SPARK_STANDALONE:
        kinds = SPARK_STANDALONE_KINDS
    else:
        kinds = SPARK_KINDS if mode == SPARK else KINDS
        kinds = (*kinds, *NETNS_KINDS) if netns else kinds
    if only is None:
        return kinds
    kept = tuple(k for k in kinds if k in only)
    if not kept:
        msg = (
            f"--kinds {','.join(only)}: the {mode} schedules draw none of them; "
            f"they draw {', '.join(kinds)}"
        )
        raise ConfigError(msg)
    return kept


def _node_budget_ok(faults: Sequence[Fault], new: Fault, replicas: int) -> bool:
    """Whether ``new`` keeps at most ``replicas - 1`` nodes down at once."""
    node_faults = [f for f in faults if f.kind in _BUDGET_KINDS]
    if any(f.target == new.target for f in node_faults):
        return False  # one fault per node and schedule keeps replays simple
    overlapping = [f for f in node_faults if _overlap(f, new)]
    return len(overlapping) + 1 <= replicas - 1


def _overlap(one: Fault, other: Fault) -> bool:
    return one.at_s < other.at_s + other.down_s and other.at_s < one.at_s + one.down_s


def replay_command(
    schedule: Schedule,
    topology: Path,
    conf: Mapping[str, Any] | None = None,
    draws: Sequence[str] = (),
) -> str:
    """Return the command that runs ``schedule`` again.

    ``conf`` is the campaign's conf; ``draws`` the options that shaped its
    draws (``--engine spark``, ``--mode local``), which the same seed needs to
    draw the same schedules.
    """
    options = "".join(
        f" -o {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in (conf or {}).items()
    )
    shaped = "".join(f" {shlex.quote(d)}" for d in draws)
    return (
        f"sr3 chaos --topology {shlex.quote(str(topology))} --seed {schedule.seed} "
        f"--schedules {schedule.index + 1} --only {schedule.index}{shaped}{options}"
    )


def recovery_times(outcomes: Sequence[Outcome]) -> dict[str, list[float]]:
    """Return each failure kind's recovery times over ``outcomes``, in seconds.

    A recovery is one rollback of a run: from the failure (the kill, when the
    run made it) to the first epoch committed after it, the report's
    ``detect_s + restore_s + replay_s``. Its kind is the fault of its first
    cause: ``kill-task`` or ``freeze-task`` for a task, ``kill-node`` or
    ``freeze-node`` for a ring node that left the ring; rollbacks with any other
    cause (a task that died of a ZooKeeper restart, say) count under ``other``.
    Rollbacks that never resumed are left out. A recovery timed only end to
    end (a Spark standalone run's, :mod:`sr3_cli.chaos_spark`) has the whole
    in its timeline's ``total_s``.
    """
    times: dict[str, list[float]] = {}
    for outcome in outcomes:
        report = outcome.report
        if report is None:
            continue
        for entry in report.recoveries:
            timeline = entry.get("timeline") or {}
            if timeline.get("total_s") is not None:
                seconds = float(timeline["total_s"])
                times.setdefault(_cause_kind(outcome.schedule, entry), []).append(
                    seconds
                )
                continue
            phases = [timeline.get(k) for k in ("detect_s", "restore_s", "replay_s")]
            if any(p is None for p in phases):
                continue
            seconds = sum(float(p) for p in phases if p is not None)
            times.setdefault(_cause_kind(outcome.schedule, entry), []).append(seconds)
    return times


def _cause_kind(schedule: Schedule, entry: Mapping[str, Any]) -> str:
    first = str(entry.get("cause", "")).split(",")[0].strip()
    for fault in schedule.faults:
        if fault.kind in TASK_KINDS and first == fault.target:
            return fault.kind
        if fault.kind in NODE_KINDS and first == f"ring node {fault.target}":
            return fault.kind
        # how a run on Apache Storm names them (storm_bridge.sparse.run.Kill)
        if fault.kind == "kill-worker" and first == f"worker {fault.target}":
            return fault.kind
        if fault.kind == "kill-coordinator" and first == COORDINATOR:
            return fault.kind
        # a Spark standalone run's (sr3_cli.chaos_spark)
        if fault.kind in ("kill-executor", "kill-driver") and first == fault.target:
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
