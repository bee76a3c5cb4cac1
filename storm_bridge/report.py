"""What ``sr3 run`` reports on the Storm engine: :class:`RunReport` and its parts.

Counters per component, checkpoints (local coordinator or native protocol),
every recovery with its timeline, the committed state and the last output per
key of each sink (``--json`` prints :meth:`RunReport.to_dict`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from backend.owners import task_label
from sr3.latency import LatencySample
from storm_bridge.cluster.checkpoints import Coordinator, Recovery
from storm_bridge.cluster.events import ComponentCounters
from storm_bridge.cluster.health import TaskOutcome
from storm_bridge.native import NATIVE
from storm_bridge.wiring import RingAccess
from topology_api.topology import LoadedTopology
from zk.epochs import ZkEpochStore

__all__ = [
    "RunReport",
    "checkpoint_dict",
    "counter_dict",
    "native_checkpoints",
    "recovery_dict",
    "state_summary",
]

_MAX_ERRORS: Final = 20


@dataclass
class RunReport:
    """What a run did; :meth:`to_dict` is the ``--json`` output.

    ``seconds`` leaves out the quiet period ``--until-idle`` waits to tell a
    dry spout from a pausing one (``sr3.idle.quiet.s``). ``task_failures``
    lists every task that died on its own (a ``--kill`` or a rollback's
    restart is not its own death) with its outcome: ``recovered``,
    ``crash_loop`` or ``down`` (:mod:`storm_bridge.cluster.health`).
    ``stragglers`` lists each task the straggler policy acted on
    (:meth:`storm_bridge.straggler.StragglerEvent.to_dict`): when it was
    detected, why, the policy, which copy won and the time to take over.
    """

    topology: str
    seconds: float
    idle: bool
    counters: dict[str, dict[str, int]]
    checkpoints: dict[str, Any]
    recoveries: list[dict[str, Any]]
    state: dict[str, Any]
    errors: list[str]
    #: Last output per key of each sink: ``{component: {json key: values}}``.
    outputs: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    #: Tasks that died on their own (``TaskFailure.to_dict``), by task id.
    task_failures: list[dict[str, Any]] = field(default_factory=list)
    #: Why an ``--until-idle`` run ended without going idle (None otherwise).
    busy: str | None = None
    #: Live rebalances of the run (``sr3 rebalance``), oldest first.
    rebalances: list[dict[str, Any]] = field(default_factory=list)
    #: Complete latency of acked tuple trees over every spout, in ms
    #: (:meth:`sr3.latency.LatencySample.summary`); empty: not measured.
    complete_latency: dict[str, Any] = field(default_factory=dict)
    #: The same by spout component.
    spout_latency: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def failed_tasks(self) -> list[str]:
        """One line per task that did not come back or kept crashing."""
        return [
            str(f["message"])
            for f in self.task_failures
            if f["outcome"] != TaskOutcome.RECOVERED.value
        ]

    @property
    def processed(self) -> int:
        """Tuples acked by bolts."""
        return sum(c["bolt_acked"] for c in self.counters.values())

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        spouts = sum(c["spout_emitted"] for c in self.counters.values())
        seconds = max(self.seconds, 1e-9)
        return {
            "topology": self.topology,
            "engine": "storm",
            "seconds": round(self.seconds, 3),
            "idle": self.idle,
            "busy": self.busy,
            "throughput": {
                "tuples_per_s": round(self.processed / seconds, 1),
                "spout_tuples_per_s": round(spouts / seconds, 1),
                "bolt_tuples": self.processed,
                "spout_tuples": spouts,
            },
            "checkpoints": {
                k: v for k, v in self.checkpoints.items() if k != "stragglers"
            },
            "recoveries": self.recoveries,
            "rebalances": self.rebalances,
            "stragglers": self.checkpoints.get("stragglers", []),
            "state": self.state,
            "outputs": self.outputs,
            "counters": self.counters,
            "complete_latency_ms": self.complete_latency or LatencySample().summary(),
            "spout_latency_ms": self.spout_latency,
            "errors": self.errors[:_MAX_ERRORS],
            "error_count": len(self.errors),
            "task_failures": self.task_failures,
        }


def recovery_dict(
    recovery: Recovery, kill_times: Mapping[str, float], started: float
) -> dict[str, Any]:
    """Return a rollback's report entry, its timeline from the first kill on."""
    first_cause = recovery.cause.split(",")[0]
    failed_at = kill_times.get(first_cause, recovery.detected_at)
    restores = recovery.restores
    mechanisms = sorted({str(r.get("mechanism")) for r in restores.values()})
    used = sorted({str(r.get("used")) for r in restores.values()})
    detect_s = round(max(0.0, recovery.detected_at - failed_at), 4)
    restore_s = replay_s = None
    if recovery.restored_at is not None:
        restore_s = round(recovery.restored_at - recovery.detected_at, 4)
        if recovery.resumed_at is not None:
            replay_s = round(recovery.resumed_at - recovery.restored_at, 4)
    timeline = {"detect_s": detect_s, "restore_s": restore_s, "replay_s": replay_s}
    # detect: failure to detection; restore: rollback to every stateful task
    # restored; replay: to the first epoch committed after the rollback.
    phases = [
        {"phase": "detect", "seconds": detect_s},
        {"phase": "restore", "seconds": restore_s},
        {"phase": "replay", "seconds": replay_s},
    ]
    return {
        "cause": recovery.cause,
        "component": recovery.component,
        "task": recovery.task_index,
        "task_id": recovery.task_id,
        "at_s": round(recovery.detected_at - started, 3),
        "mechanism": ",".join(mechanisms) or "none",
        "used": ",".join(used) or "none",
        "timeline": timeline,
        "phases": phases,
        "restored_bytes": sum(int(r.get("bytes", 0)) for r in restores.values()),
        "restores": restores,
        "scope": recovery.scope,
        "restored_tasks": sorted(task_label(owner) for owner in restores),
        "reason": recovery.reason,
        "lazy": any(r.get("lazy") is True for r in restores.values()),
        # the structure a lazy restore's background load ran (star, line, tree)
        "transfer": ",".join(
            sorted({str(r["transfer"]) for r in restores.values() if r.get("transfer")})
        )
        or "none",
        "first_tuple_s": _latest(restores.values(), "first_tuple_s"),
        "state_loaded_s": _latest(restores.values(), "state_loaded_s"),
        "caught_up_s": (
            None
            if recovery.caught_up_at is None
            else round(recovery.caught_up_at - recovery.detected_at, 4)
        ),
        "replayed_inputs": recovery.replayed_inputs,
        "outputs_to_match": recovery.outputs_to_match,
    }


def _latest(restores: Iterable[Mapping[str, Any]], name: str) -> float | None:
    """The largest ``name`` of the restores (None: no restore reported one).

    ``first_tuple_s``: seconds from a restored task's readiness to its first
    processed tuple; ``state_loaded_s``: to its whole state having arrived (0
    for an eager restore, which has it all at readiness).
    """
    found = [float(r[name]) for r in restores if r.get(name) is not None]
    return max(found) if found else None


def checkpoint_dict(coordinator: Coordinator, interval_s: float) -> dict[str, Any]:
    """Return the report's checkpoints of the local coordinator."""
    durations = [e.duration_s for e in coordinator.committed]
    return {
        "interval_s": interval_s,
        "count": len(coordinator.committed),
        "last_committed_epoch": coordinator.last_committed,
        "mean_duration_s": round(statistics.fmean(durations), 4) if durations else None,
        "max_duration_s": round(max(durations), 4) if durations else None,
        "abandoned": coordinator.abandoned,
        "stragglers": coordinator.straggler_report(),
        "local_recovery": coordinator.local_report(),
    }


def native_checkpoints(
    ring: RingAccess, store: ZkEpochStore, topology: str, interval_s: float
) -> dict[str, Any]:
    """Return the report's checkpoints of the native protocol (ZooKeeper stats)."""
    control = store.control()
    stats = dict(control.stats) if control is not None else {}
    record = ring.committed(topology)
    commits = int(stats.get("commits", 0))
    total = float(stats.get("pause_total_s", 0.0))
    return {
        "mode": NATIVE,
        "interval_s": interval_s,
        "count": commits,
        "last_committed_epoch": None if record is None else record.epoch,
        "mean_duration_s": round(total / commits, 4) if commits else None,
        "max_duration_s": stats.get("pause_max_s") if commits else None,
        "rollbacks": int(stats.get("rollbacks", 0)),
        "abandoned": 0,
        # each rollback's sr3.recovery.scope decision, by generation: the
        # owners it restored (None: all) and why
        "scopes": dict(stats.get("scopes") or {}),
    }


def counter_dict(
    topology: LoadedTopology, counters: Mapping[str, ComponentCounters]
) -> dict[str, dict[str, int]]:
    """Return the report's counters of each component."""
    return {
        name: {
            "spout_emitted": c.emitted
            if topology.components[name].kind == "spout"
            else 0,
            "bolt_acked": c.acked if topology.components[name].kind == "bolt" else 0,
            "emitted": c.emitted,
            "acked": c.acked,
            "failed": c.failed,
            "restarts": c.restarts,
            "errors": c.errors,
        }
        for name, c in counters.items()
    }


def state_summary(ring: RingAccess, topology: LoadedTopology) -> dict[str, Any]:
    """Return the committed epoch and key count of each stateful bolt."""
    bolts = [
        name
        for name in topology.stateful_components
        if topology.components[name].kind == "bolt"
    ]
    return ring.state_summary(topology.name, bolts)
