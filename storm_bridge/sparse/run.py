"""``sr3 run --engine apache-storm``: a topology file on a real Storm cluster.

:func:`run_on_storm` starts from an empty committed epoch (or resumes), builds
the jar and submits it as ``sparse submit`` does (:mod:`.submit`) with
``sr3.checkpoint.mode=native``, follows the native protocol's control record in
ZooKeeper, injects kills (a task's Python process, a worker JVM, a supervisor,
a ring node), decides when the run is over, reads Storm's counters from Nimbus,
kills the topology and reports in the shape of the other engines. Injecting
the kills and watching for fatal task errors is a
:class:`~storm_bridge.sparse.live.LiveRun`'s.

A run is final (``--until-idle``) when two consecutive commits of one
generation hold the same spout offsets, every replayable spout task among them:
each commit drains every tree its spouts emitted before it (PAUSE), so nothing
was emitted between the two and the second one holds the final state. Every
task or worker kill must have been followed by a rollback first.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from backend.committer import EpochCommitter
from sr3.config import CheckpointConfig
from storm_bridge.messages import GENERATION_FIELD_KEY
from storm_bridge.native import MODE_KEY, NATIVE, SPOUT
from storm_bridge.report import native_checkpoints, state_summary
from storm_bridge.runner_session import deliver_stopped
from storm_bridge.sparse.live import (
    GONE_TIMEOUT_S,
    POLL_S,
    Kill,
    LiveRun,
    StormRunError,
    Supervisors,
)
from storm_bridge.sparse.monitor import ControlMonitor
from storm_bridge.sparse.package import build_jar
from storm_bridge.sparse.stats import counters_of, errors_of
from storm_bridge.sparse.submit import (
    NimbusSession,
    python_components,
    streamparse_run_of,
)
from storm_bridge.sparse.workers import worker_processes
from storm_bridge.wiring import RingAccess
from topology_api.topology import LoadedTopology, load_topology
from zk.epochs import ZkEpochStore

__all__ = ["Kill", "StormRunError", "StormRunOptions", "Supervisors", "run_on_storm"]

logger = logging.getLogger(__name__)

_STATS_SETTLE_S: Final = 10.0
_STATS_POLL_S: Final = 1.5
E_NOT_STARTED = (
    "topology {name!r} did not start on Storm within {timeout:g} s (no epoch "
    "committed). {errors}"
)


@dataclass(frozen=True)
class StormRunOptions:
    """What ``sr3 run --engine apache-storm`` asks for (see ``RunOptions``)."""

    until_idle: bool = False
    duration_s: float | None = None
    kills: Sequence[Kill] = ()
    conf: Mapping[str, Any] = field(default_factory=dict)
    serializer: str = "json"
    timeout_s: float = 600.0
    resume: bool = False
    start_timeout_s: float = 180.0
    #: Called once the topology started: the moment kills count from.
    on_started: Callable[[], None] | None = None
    #: Whether trees carry their generation in the hidden trailing field
    #: (:mod:`storm_bridge.generation_field`); off only to measure without it.
    generation_field: bool = True


def _check_kills(topology: LoadedTopology, options: StormRunOptions) -> None:
    for kill in options.kills:
        if options.duration_s is not None and kill.at_s >= options.duration_s:
            msg = (
                f"kill of {kill.label} at {kill.at_s:g} s is not before the end of "
                f"the run (--duration {options.duration_s:g}); kill earlier"
            )
            raise StormRunError(msg)
        if kill.kind != "task":
            continue
        problem = topology.task_problem(kill.component, kill.index)
        if problem is not None:
            msg = f"--kill {kill.label}: {problem}"
            raise StormRunError(msg)


def _spout_tasks(topology: LoadedTopology) -> int:
    return sum(
        c.tasks
        for c in topology.components.values()
        if c.kind == "spout" and c.stateful
    )


def _conf(
    topology: LoadedTopology,
    ring: RingAccess,
    options: StormRunOptions,
    *,
    secret: bool,
) -> dict[str, Any]:
    config = ring.config
    if not config.zk.hosts:
        msg = "sr3.zk.hosts is empty: give --zk HOSTS or --lab DIR"
        raise StormRunError(msg)
    conf: dict[str, Any] = {
        # exact counters, sent to Nimbus every second (Storm: 5 %, every 60 s)
        "topology.stats.sample.rate": 1.0,
        "executor.metrics.frequency.secs": 1,
        **topology.config,
        **options.conf,
        MODE_KEY: NATIVE,
        GENERATION_FIELD_KEY: options.generation_field,
        "sr3.zk.hosts": config.zk.hosts,
        "sr3.zk.chroot": config.zk.chroot,
    }
    if secret and config.node.secret:
        conf.setdefault("sr3.node.secret", config.node.secret)
    return conf


def _wait_gone(
    session: NimbusSession, run: LiveRun, clock: Callable[[], float]
) -> None:
    deadline = clock() + GONE_TIMEOUT_S
    while clock() < deadline:
        if run.topology.name not in session.topologies() and not worker_processes(
            run.topology_id
        ):
            return
        time.sleep(POLL_S)  # no events from Nimbus or /proc: poll
    logger.warning("topology %s still has workers after its kill", run.topology.name)


def run_on_storm(  # noqa: PLR0913 (keyword-only collaborators)
    path: str | Path,
    *,
    ring: RingAccess,
    nimbus: str,
    options: StormRunOptions,
    supervisors: Supervisors | None = None,
    kill_node: Callable[[str], None] | None = None,
    secret_in_conf: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run a topology file on the Storm cluster behind ``nimbus``; return the report.

    ``secret_in_conf`` puts the ring secret in the topology conf, for clusters
    that do not hand it to their workers (a lab's do, in their environment:
    workers log their topology conf).

    Raises:
        TopologyError: the file cannot be loaded.
        StormRunError: bad kills, a topology of that name already runs, or it
            did not start (the message carries the errors Storm reported).
        SubmitError: Nimbus refused the topology.
        NimbusUnreachableError: no Nimbus at ``nimbus``.
        CoordinationError: ZooKeeper failed.
    """
    topology = load_topology(path)
    _check_kills(topology, options)
    conf = _conf(topology, ring, options, secret=secret_in_conf)
    session = NimbusSession(nimbus)
    if topology.name in session.topologies():
        msg = (
            f"a topology named {topology.name!r} already runs on Nimbus {nimbus}; "
            f"kill it first (`sparse kill -e lab -n {topology.name}`)"
        )
        raise StormRunError(msg)
    python_components(
        topology,
        run=streamparse_run_of(),
        serializer=options.serializer,
        generation_field=options.generation_field,
    )
    EpochCommitter(ring, topology.name, background=False).start(
        resume=options.resume, fixed=topology.fixed_parallelism()
    )
    store = ZkEpochStore(ring.session, topology.name)
    # a new deployment, resumed or not: the previous run's tasks (maybe at
    # another parallelism) must not be waited for; the committed epoch and
    # offsets stay in the commit record
    store.reset()
    scratch = Path(tempfile.mkdtemp(prefix="sr3-storm-jar-"))
    try:
        jar = build_jar(topology.path, scratch / f"{topology.name}.jar")
        location = session.upload(jar)
        submitted = clock()
        topology_id = session.submit(topology, location=location, conf=conf)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    monitor = ControlMonitor(store, ring, topology.name, clock=clock)
    run = LiveRun(
        topology, session, topology_id, monitor, supervisors, kill_node, clock
    )
    run.interval_s = CheckpointConfig.from_mapping(conf).interval_s
    monitor.start()
    try:
        report = _drive(run, options, conf, submitted)
    finally:
        monitor.stop()
        session.kill(topology.name)
        _wait_gone(session, run, clock)
    # sinks that write on commit (KafkaSink) write the final epoch, as on the
    # local cluster: the topology was killed right after that commit
    deliver_stopped(topology, conf, ring)
    return report


def _started(run: LiveRun, options: StormRunOptions) -> float:
    deadline = run.clock() + options.start_timeout_s
    limit_s = options.duration_s if options.duration_s is not None else float("inf")
    while run.clock() < deadline:
        # up once the coordinator (spout task 0) wrote its first control record
        # and an epoch committed, or, with the interval longer than the run
        # (checkpoints practically off), once the coordinator is up
        seen, first = run.monitor.first_seen_at(), run.monitor.first_commit_at()
        if seen is not None and (first is not None or run.interval_s > limit_s):
            return seen
        run.check_errors()
        time.sleep(POLL_S)  # no events from Nimbus or /proc: poll
    errors = errors_of(run.session.topology_info(run.topology_id))
    detail = (
        "Storm reported: " + " | ".join(errors[-3:])
        if errors
        else "Storm reported no error; see the workers' worker.log"
    )
    if not worker_processes(run.topology_id):
        detail += (
            "; no worker of it runs on this machine: check that a supervisor with "
            "free slots runs (`sr3 status`)"
        )
    msg = E_NOT_STARTED.format(
        name=run.topology.name, timeout=options.start_timeout_s, errors=detail
    )
    raise StormRunError(msg)


def _drive(
    run: LiveRun, options: StormRunOptions, conf: Mapping[str, Any], submitted: float
) -> dict[str, Any]:
    started = _started(run, options)
    if options.on_started is not None:
        options.on_started()
    limit = options.timeout_s if options.until_idle else float("inf")
    if options.duration_s is not None:
        limit = min(limit, options.duration_s)
    end = started + limit
    pending = sorted(options.kills, key=lambda k: k.at_s)
    final_at: float | None = None
    spouts = _spout_tasks(run.topology)
    while run.clock() < end:
        while pending and run.clock() >= started + pending[0].at_s:
            if not run.inject(pending[0], started + pending[0].at_s):
                break
            pending.pop(0)
        if options.until_idle and not pending and run.recovered():
            final_at = run.monitor.final_commit(spouts, after=_settled_since(run))
            # spouts deactivated (a rebalance) emit nothing while the
            # coordinator commits on: equal offsets then prove nothing
            if final_at is not None and run.active():
                break
            final_at = None
        run.check_errors()
        time.sleep(POLL_S)  # no events from Nimbus or /proc: poll
    # a finished run's counters settle; a running one's are read as they are
    # (Storm's lag the executors' metrics interval behind)
    seconds = (final_at or run.clock()) - started
    info = (
        _settled_info(run)
        if final_at is not None
        else run.session.topology_info(run.topology_id)
    )
    ring = run.monitor.ring
    interval = CheckpointConfig.from_mapping(conf).interval_s
    store = run.monitor.store
    counters = counters_of(info, run.topology)
    processed = sum(c["bolt_acked"] for c in counters.values())
    spout_tuples = sum(c["spout_emitted"] for c in counters.values())
    errors = errors_of(info)
    idle = final_at is not None
    return {
        "topology": run.topology.name,
        "engine": "apache-storm",
        "nimbus": run.session.nimbus,
        "topology_id": run.topology_id,
        "seconds": round(seconds, 3),
        "startup_s": round(started - submitted, 3),
        "idle": idle,
        "busy": None
        if idle or not options.until_idle
        else "the final epoch did not commit in time",
        "throughput": {
            "tuples_per_s": round(processed / max(seconds, 1e-9), 1),
            "spout_tuples_per_s": round(spout_tuples / max(seconds, 1e-9), 1),
            "bolt_tuples": processed,
            "spout_tuples": spout_tuples,
        },
        "checkpoints": native_checkpoints(ring, store, run.topology.name, interval),
        "recoveries": [
            run.monitor.recovery(kill.label, at, started) for kill, at in run.killed
        ],
        "state": state_summary(ring, run.topology),
        "outputs": {},
        "counters": counters,
        "errors": errors[:20],
        "error_count": len(errors),
        "task_failures": [],
        "registered_spouts": sorted(store.registered(SPOUT)),
    }


def _settled_info(run: LiveRun) -> Any:
    """Nimbus's TopologyInfo once its counters stopped moving (they lag ~1 s)."""
    deadline = run.clock() + _STATS_SETTLE_S
    last: tuple[int, ...] | None = None
    info = run.session.topology_info(run.topology_id)
    while run.clock() < deadline:
        totals = tuple(
            sorted(sum(c.values()) for c in counters_of(info, run.topology).values())
        )
        if totals == last and any(totals):
            break
        last = totals
        time.sleep(_STATS_POLL_S)  # Nimbus stats refresh every second: poll
        info = run.session.topology_info(run.topology_id)
    return info


def _last_kill(run: LiveRun) -> float | None:
    return max((at for _, at in run.killed), default=None)


def _settled_since(run: LiveRun) -> float | None:
    """After the last kill and the last time the topology was seen inactive."""
    marks = [at for at in (_last_kill(run), run.inactive_at) if at is not None]
    return max(marks, default=None)
