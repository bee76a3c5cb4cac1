"""Running a topology file on the local cluster with exactly-once checkpoints.

:func:`run_topology` wires a :class:`LocalCluster` to ZooKeeper and the ring: it
starts the run from an empty committed epoch above every epoch published
before, records commits in ZooKeeper, handles a ring node leaving (a rollback,
or under task scope the open epoch given up), injects the requested task and
node kills, and reports throughput, checkpoints and every recovery with its
timeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from backend.committer import EpochCommitter, StartPoint
from sr3.config import CheckpointConfig, StormConfig
from sr3.errors import SR3Error
from storm_bridge.cluster import ClusterOptions, EventKind, LocalCluster
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.engine import checked_confs
from storm_bridge.errors import CheckpointError, StormBridgeError
from storm_bridge.metrics import RunMetricsFeed
from storm_bridge.multilang import get_serializer
from storm_bridge.native import NATIVE, checkpoint_mode
from storm_bridge.rebalancing import LiveRebalancing
from storm_bridge.report import (
    RunReport,
    checkpoint_dict,
    counter_dict,
    native_checkpoints,
    recovery_dict,
    state_summary,
)
from storm_bridge.runner_session import (
    NodeKill,
    RunSession,
    TaskFreeze,
    TaskKill,
    busy_reason,
    check_kills,
    close_epochs,
    deliver_stopped,
    native_final,
)
from storm_bridge.wiring import CommitRecord, RingAccess
from topology_api.topology import load_topology
from zk.epochs import ZkEpochStore

__all__ = [
    "NodeKill",
    "RunOptions",
    "RunReport",
    "TaskFreeze",
    "TaskKill",
    "run_topology",
]

logger = logging.getLogger(__name__)

#: How long a task restarted after dying on its own gets, once the run is over,
#: to come up again before the report calls it down.
_SETTLE_S: Final = 10.0


@dataclass(frozen=True)
class RunOptions:
    """What ``sr3 run`` asks for.

    Attributes:
        until_idle: Stop once spouts are dry, nothing is in flight and a final
            epoch committed.
        duration_s: Stop after this long (with ``until_idle``: at the latest).
        kills: Task kills to inject.
        node_kills: Ring node kills to inject.
        freezes: Task stalls to inject (SIGSTOP, then SIGCONT).
        conf: Storm conf overriding the topology's ``config``.
        serializer: ``json`` or ``msgpack``.
        timeout_s: Upper bound of an ``until_idle`` run.
        checkpoints: Whether to checkpoint at all (off: plain Storm semantics).
            ``sr3.checkpoint.mode`` in ``conf`` (or the topology's
            config): ``local`` (default) runs the local cluster's coordinator
            (aligned barriers, global rollback); ``native`` runs the cluster
            without it, so the tasks checkpoint through ZooKeeper on their own
            (:mod:`storm_bridge.native`), as on a real Storm cluster.
        resume: Continue from the topology's last committed epoch instead of
            starting from empty state.
        environment: Picks each component's parallelism where the topology
            gives one per environment (``par={"prod": 4, "dev": 1}``), as
            ``sparse run -e`` does.
        start_from: Start from a savepoint or an earlier epoch instead
            (:class:`backend.committer.StartPoint`; implies ``resume``).
        metrics_targets: A lab's Prometheus targets dir, where the run lists
            its metrics endpoint while it runs (None: not listed).
    """

    until_idle: bool = False
    duration_s: float | None = None
    kills: Sequence[TaskKill] = ()
    node_kills: Sequence[NodeKill] = ()
    freezes: Sequence[TaskFreeze] = ()
    conf: Mapping[str, Any] = field(default_factory=dict)
    serializer: str = "json"
    timeout_s: float = 600.0
    checkpoints: bool = True
    resume: bool = False
    environment: str | None = None
    start_from: StartPoint | None = None
    metrics_targets: Path | None = None


class _ZkHooks:
    """The local cluster's coordinator commits through the epoch committer.

    After epoch ``e`` commits, what it supersedes is collected in the
    background (:class:`backend.committer.EpochCommitter`).
    """

    def __init__(self, committer: EpochCommitter) -> None:
        self._committer = committer

    def commit(
        self,
        epoch: int,
        offsets: Mapping[str, Any],
        owners: list[str],
        key_groups: Mapping[str, Any] | None = None,
    ) -> None:
        record = CommitRecord(
            epoch=epoch,
            offsets=dict(offsets),
            owners=tuple(owners),
            key_groups=dict(key_groups or {}),
        )
        try:
            self._committer.commit(record)
        except SR3Error as exc:
            topology = self._committer.topology
            msg = f"epoch {epoch} of topology {topology!r} did not commit: {exc}"
            raise CheckpointError(msg) from exc

    def close(self) -> None:
        self._committer.close()


def _check_kill_times(options: RunOptions) -> None:
    """Refuse a kill the run would end before (it would stretch ``--duration``)."""
    end_s = options.duration_s
    if end_s is None:
        return
    kills: list[TaskKill | NodeKill] = [*options.kills, *options.node_kills]
    for kill in kills:
        if kill.at_s >= end_s:
            what = (
                f"--kill {kill.component}:{kill.index}"
                if isinstance(kill, TaskKill)
                else f"--kill-node {kill.node}"
            )
            msg = (
                f"{what}@{kill.at_s:g} is not before the end of the run "
                f"(--duration {end_s:g}); kill earlier or run longer"
            )
            raise StormBridgeError(msg)


def run_topology(
    path: str | Path,
    *,
    ring: RingAccess,
    options: RunOptions,
    kill_node: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunReport:
    """Run a topology file on the local cluster, checkpointing into the ring.

    Args:
        path: The topology file.
        ring: Open handles on ZooKeeper and the ring.
        options: Duration, kills, conf and serializer.
        kill_node: SIGKILLs a ring node by id (a lab's), for ``NodeKill``.
        clock: Monotonic clock in seconds.

    Raises:
        TopologyError: the file cannot be loaded, or a Storm conf value is
            invalid (refused before the committed state is touched).
        StormBridgeError: bad kill specs (a kill at or after ``duration_s``
            among them), or the cluster failed to start.
        ConfigError: a sink's ``sr3.output.key.fields`` is invalid.
        CoordinationError: ZooKeeper failed.
    """
    topology = load_topology(path, environment=options.environment)
    check_kills(topology, [*options.kills, *options.freezes])
    _check_kill_times(options)
    if options.node_kills and kill_node is None:
        msg = (
            "--kill-node needs a lab whose nodes this run can kill; pass --lab DIR "
            "(or run without --lab/--zk for an embedded one)"
        )
        raise StormBridgeError(msg)
    config = ring.config
    conf: dict[str, Any] = dict(options.conf)
    if options.checkpoints:
        # Tasks reach ZooKeeper and the ring only when checkpointing: without
        # it, state stays in memory (plain Storm semantics, nothing restored).
        conf.update(
            {"sr3.zk.hosts": config.zk.hosts, "sr3.zk.chroot": config.zk.chroot}
        )
    settings = CheckpointConfig.from_mapping({**topology.config, **conf})
    local = StormConfig.from_mapping({**topology.config, **conf})
    interval_s, timeout_s = settings.interval_s, settings.timeout_s
    # refuse a bad conf value before the run replaces the committed state
    checked_confs(topology, conf, get_serializer(options.serializer))
    native = checkpoint_mode({**topology.config, **conf}) == NATIVE
    checkpoint = None
    hooks = None
    store: ZkEpochStore | None = None
    committer = EpochCommitter(ring, topology.name, retain=settings.retain)
    if options.checkpoints and native:
        # no coordinator in the cluster: the tasks run the native protocol
        committer.start(
            resume=options.resume,
            start_from=options.start_from,
            components=topology.stateful_components,
            fixed=topology.fixed_parallelism(),
        )
        store = ZkEpochStore(ring.session, topology.name)
        # a new deployment, resumed or not: the previous run's tasks (maybe at
        # another parallelism) must not be waited for; the committed epoch
        # and offsets stay in the commit record
        store.reset()
    elif options.checkpoints:
        first = committer.start(
            resume=options.resume,
            start_from=options.start_from,
            components=topology.stateful_components,
            fixed=topology.fixed_parallelism(),
        )
        hooks = _ZkHooks(committer)
        start = committer.committed()
        checkpoint = CheckpointSettings(
            hooks,
            interval_s,
            first,
            timeout_s,
            start_tables=dict(start.key_groups) if start is not None else {},
        )
    cluster = LocalCluster(
        topology,
        conf,
        serializer=options.serializer,
        env={"SR3_NODE_SECRET": config.node.secret},
        checkpoint=checkpoint,
        clock=clock,
        options=ClusterOptions(fork_tasks=local.fork_tasks),
    )
    run = RunSession(cluster, ring, kill_node, clock)
    if options.until_idle:
        # a task that cannot come up keeps the topology from ever being
        # idle (or, with two such spouts, even active): end the run (reported
        # as failed) instead of restarting it until --timeout
        cluster.give_up_on_tasks_never_up()
    cluster.start()
    live = None
    if checkpoint is not None:
        live = LiveRebalancing(cluster, ring, topology.name, clock)
    metrics = RunMetricsFeed(cluster, topology.name, config, options.metrics_targets)
    metrics.start()
    started = clock()
    idle = False
    busy: str | None = None
    rebalances: list[dict[str, Any]] = []
    failure: str | None = None  # why the run failed, for a rebalance left unfinished
    try:
        if live is not None:
            live.start(started)
        run.watch_ring()
        run.inject(options.kills, options.node_kills, started, options.freezes)
        if options.until_idle:
            limit = options.timeout_s
            if options.duration_s is not None:
                limit = min(limit, options.duration_s)
            if store is not None:
                idle = native_final(run, store, topology.name, started + limit)
            else:
                idle = run.final_epoch(started + limit)
            if not idle:
                busy = busy_reason(run, waits_for_nodes=store is None)
                logger.warning("not idle by the end of the run: %s", busy)
            else:
                close_epochs(cluster, clock, clock() + _SETTLE_S)
        elif options.duration_s is not None:
            remaining = started + options.duration_s - clock()
            if remaining > 0:
                threading.Event().wait(remaining)
        # the quiet period that tells a dry spout from a pausing one is not
        # processing time: leave it out of the run's seconds (and throughput)
        seconds = clock() - started - cluster.quiet_waited_s()
        cluster.wait_settled(_SETTLE_S)
        failures = [f.to_dict() for f in cluster.task_failures()]
        counters = counter_dict(topology, cluster.counters())
        coordinator_view = cluster.with_coordinator(
            lambda k: (
                checkpoint_dict(k, interval_s),
                [recovery_dict(r, run.kill_times, started) for r in k.recoveries],
            )
        )
        if store is not None:
            view = native_checkpoints(ring, store, topology.name, interval_s)
            coordinator_view = (
                {**view, "stragglers": cluster.straggler_events()},
                [],
            )
        errors = [str(e) for e in cluster.errors()] + run.skipped
        errors += [e.message for e in cluster.events(EventKind.COMPONENT_ERROR)]
        outputs = cluster.outputs()
        complete_latency, spout_latency = cluster.complete_latency()
    except BaseException as exc:
        failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if live is not None:
            rebalances = live.report()
            live.close(failure)
        metrics.close()
        cluster.stop()
        committer.close()
    if options.checkpoints and idle:
        deliver_stopped(topology, conf, ring)
    checkpoints, recoveries = coordinator_view or ({"count": 0}, [])
    state = state_summary(ring, topology) if options.checkpoints else {}
    return RunReport(
        topology=topology.name,
        seconds=seconds,
        idle=idle,
        counters=counters,
        checkpoints=checkpoints,
        recoveries=recoveries,
        state=state,
        errors=errors,
        outputs=outputs,
        task_failures=failures,
        busy=busy,
        rebalances=rebalances,
        complete_latency=complete_latency,
        spout_latency=spout_latency,
    )
