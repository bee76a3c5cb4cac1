"""Chaos schedules on a real Apache Storm cluster (``sr3 chaos --engine apache-storm``).

Each schedule is one :func:`~storm_bridge.sparse.run.run_on_storm` of the
topology, as ``sr3 run --engine apache-storm --until-idle`` does it, with the
schedule's kills: a task's Python process, a worker JVM, the native
coordinator's process (the spout task holding its znode) and ring nodes, the
last restarted by the lab after their ``down_s`` (:class:`Injector`, whose
timeline starts when the topology did, the moment the run's kills count from).
The final committed state must equal a failure-free run's on the same cluster
(:func:`run_clean`); Storm's report has no last outputs to compare.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sr3.config import Sr3Config
from sr3.errors import SR3Error
from sr3.recovery.transfer_plan import BROKEN_BUILD_ENV
from sr3_cli.chaos import Outcome, Schedule
from sr3_cli.chaos_compare import Comparison
from sr3_cli.chaos_runs import Injector, final_state, verdict
from sr3_cli.lab import Lab
from storm_bridge.report import RunReport
from storm_bridge.sparse.run import Kill, StormRunOptions, Supervisors, run_on_storm
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

__all__ = ["StormTarget", "run_clean", "run_storm_schedule", "storm_kills"]

#: Storm conf of a campaign's runs unless ``-o`` says otherwise: a killed
#: task's trees time out after 5 s (Storm: 30 s), which bounds each recovery.
STORM_CONF: Mapping[str, Any] = {"topology.message.timeout.secs": 5}


@dataclass(frozen=True)
class StormTarget:
    """The Storm cluster a campaign submits to."""

    nimbus: str
    #: The lab's supervisors (None with ``--nimbus``).
    supervisors: Supervisors | None = None
    #: Put the ring secret in the topology conf (clusters not the lab's).
    secret_in_conf: bool = True


def storm_kills(schedule: Schedule) -> list[Kill]:
    """Return the kills ``run_on_storm`` injects for ``schedule``'s faults."""
    kills = []
    for fault in schedule.faults:
        if fault.kind == "kill-task":
            name, index = fault.target.rsplit(":", 1)
            kills.append(Kill("task", fault.at_s, index=int(index), component=name))
        elif fault.kind == "kill-worker":
            kills.append(Kill("worker", fault.at_s, index=int(fault.target)))
        elif fault.kind == "kill-coordinator":
            kills.append(Kill("coordinator", fault.at_s))
        elif fault.kind == "kill-node":
            kills.append(Kill("node", fault.at_s, node=fault.target))
    return kills


def _conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**STORM_CONF, **conf}
    # workers are the supervisor's children, not the CLI's: the test-only
    # broken-build switch reaches their tasks through Storm's worker environment
    broken = os.environ.get(BROKEN_BUILD_ENV)
    if broken:
        environment = dict(merged.get("topology.environment") or {})
        merged["topology.environment"] = {**environment, BROKEN_BUILD_ENV: broken}
    return merged


def _report(raw: Mapping[str, Any]) -> RunReport:
    return RunReport(
        topology=str(raw["topology"]),
        seconds=float(raw["seconds"]),
        idle=bool(raw["idle"]),
        counters=dict(raw["counters"]),
        checkpoints=dict(raw["checkpoints"]),
        recoveries=list(raw["recoveries"]),
        state=dict(raw["state"]),
        errors=list(raw["errors"]),
        busy=raw.get("busy"),
    )


def run_clean(
    lab: Lab,
    path: Path,
    target: StormTarget,
    *,
    conf: Mapping[str, Any],
    timeout_s: float,
) -> tuple[RunReport, dict[str, Any]]:
    """Run the topology without faults on Storm; return its report and final state."""
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        raw = run_on_storm(
            path,
            ring=ring,
            nimbus=target.nimbus,
            options=StormRunOptions(
                until_idle=True, conf=_conf(conf), timeout_s=timeout_s
            ),
            supervisors=target.supervisors,
            secret_in_conf=target.secret_in_conf,
        )
        return _report(raw), final_state(ring, load_topology(path))
    finally:
        ring.close()


def run_storm_schedule(  # noqa: PLR0913 (run_schedule's options)
    lab: Lab,
    path: Path,
    schedule: Schedule,
    *,
    target: StormTarget,
    conf: Mapping[str, Any],
    expected: Mapping[str, Any],
    timeout_s: float,
    comparison: Comparison | None = None,
) -> Outcome:
    """Run ``schedule`` on Storm; compare its final committed state to ``expected``."""
    topology = load_topology(path)
    injector = Injector(lab, schedule.faults)
    options = StormRunOptions(
        until_idle=True,
        kills=storm_kills(schedule),
        conf=_conf(conf),
        timeout_s=timeout_s,
        on_started=injector.start,
    )
    started = time.monotonic()
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        raw = run_on_storm(
            path,
            ring=ring,
            nimbus=target.nimbus,
            options=options,
            supervisors=target.supervisors,
            kill_node=injector.kill_node,
            secret_in_conf=target.secret_in_conf,
        )
        injector.finish(timeout_s)
        state = final_state(ring, topology)
    except SR3Error as exc:
        seconds = time.monotonic() - started
        reason = f"the run raised {type(exc).__name__}: {exc}"
        return Outcome(schedule, False, seconds, reason, None)
    finally:
        injector.finish(timeout_s)
        ring.close()
    seconds = time.monotonic() - started
    report = _report(raw)
    # Storm's report has no last outputs: the state alone is compared
    reason = verdict(report, state, expected, None, injector.errors, comparison)
    return Outcome(schedule, not reason, seconds, reason, report)
