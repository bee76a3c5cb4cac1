"""Running a topology file on the local cluster with exactly-once checkpoints.

:func:`run_topology` wires a :class:`LocalCluster` to ZooKeeper and the ring: it
starts the run from an empty committed epoch above every epoch published
before, records commits in ZooKeeper, rolls the topology back when a ring node
leaves, injects the requested task and node kills, and reports throughput,
checkpoints and every recovery with its timeline.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from backend.committer import EpochCommitter, StartPoint
from sr3.config import CheckpointConfig
from sr3.errors import SR3Error
from storm_bridge.cluster import EventKind, LocalCluster
from storm_bridge.cluster.checkpoints import Coordinator
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
from storm_bridge.ringwatch import RingWatch
from storm_bridge.wiring import CommitRecord, RingAccess
from topology_api.topology import LoadedTopology, load_topology
from zk.epochs import Phase, ZkEpochStore

__all__ = [
    "NodeKill",
    "RunOptions",
    "RunReport",
    "TaskFreeze",
    "TaskKill",
    "run_topology",
]

logger = logging.getLogger(__name__)

_NATIVE_POLL_S: Final = 0.05
#: How long a task restarted after dying on its own gets, once the run is over,
#: to come up again before the report calls it down.
_SETTLE_S: Final = 10.0


@dataclass(frozen=True)
class TaskKill:
    """SIGKILL task ``index`` of ``component`` ``at_s`` seconds into the run."""

    component: str
    index: int
    at_s: float


@dataclass(frozen=True)
class TaskFreeze:
    """SIGSTOP task ``index`` of ``component`` ``at_s`` seconds into the run.

    The task is continued (SIGCONT) ``down_s`` seconds later: a stall, not a
    crash (a straggler, a long GC pause, a swapped-out process).
    """

    component: str
    index: int
    at_s: float
    down_s: float


@dataclass(frozen=True)
class NodeKill:
    """SIGKILL ring node ``node`` ``at_s`` seconds into the run."""

    node: str
    at_s: float


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

    def commit(self, epoch: int, offsets: Mapping[str, Any], owners: list[str]) -> None:
        record = CommitRecord(epoch=epoch, offsets=dict(offsets), owners=tuple(owners))
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


def _signal(pid: int, sig: int) -> None:
    """Signal a task's process; one that died meanwhile is left alone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        logger.info("task process %s ended before signal %s", pid, sig)


def _check_kills(
    topology: LoadedTopology, kills: Sequence[TaskKill | TaskFreeze]
) -> None:
    for kill in kills:
        comp = topology.components.get(kill.component)
        if comp is None:
            known = ", ".join(topology.components)
            msg = (
                f"--kill {kill.component}:{kill.index}: topology {topology.name!r} "
                f"has no component {kill.component!r} (components: {known})"
            )
            raise StormBridgeError(msg)
        if not 0 <= kill.index < comp.tasks:
            msg = (
                f"--kill {kill.component}:{kill.index}: component {kill.component!r} "
                f"has tasks 0..{comp.tasks - 1}"
            )
            raise StormBridgeError(msg)


class _Run:
    """One run: the cluster, its kill schedule and its ring watch."""

    def __init__(
        self,
        cluster: LocalCluster,
        ring: RingAccess,
        kill_node: Callable[[str], None] | None,
        clock: Callable[[], float],
    ) -> None:
        self.cluster = cluster
        self.ring = ring
        self.kill_node = kill_node
        self.clock = clock
        self.started = clock()
        self.kill_times: dict[str, float] = {}
        self.killed_tasks: list[tuple[int, float]] = []
        #: Kills and freezes of a task a live rebalance removed, as reported.
        self.skipped: list[str] = []
        self._wakeup = threading.Event()
        self.ring_watch = RingWatch(
            ring.membership,
            self._node_left,
            clock,
            lambda: ring.session.connected,
        )

    def watch_ring(self) -> None:
        """Roll back whenever a registration leaves the ring, rejoins included."""
        self.ring_watch.start()

    def _node_left(self, node: str) -> None:
        cause = f"ring node {node}"
        if self.cluster.with_coordinator(lambda c: c.rolls_back):
            try:
                self.cluster.rollback(cause)
            except StormBridgeError as exc:
                logger.warning("rollback after %s skipped: %s", cause, exc)
        else:
            # no stateful bolt, no replayable spout: no task keeps anything in
            # the ring, and restarting them all would only lose their memory
            logger.info("%s left the ring; nothing to roll back", cause)

    def wait_nodes_handled(self, deadline: float) -> bool:
        """Wait until every killed ring node left the ring and was rolled back."""
        return self.ring_watch.wait_handled(deadline)

    def _task_id(self, flag: str, component: str, index: int) -> int | None:
        """The task id of ``component:index`` now; None once a rebalance removed it.

        The index was checked against the component's task count at the start;
        a live rebalance (``sr3 rebalance``) may have lowered that count since.
        """
        ids = self.cluster.task_ids(component)
        if index < len(ids):
            return ids[index]
        note = (
            f"{flag} {component}:{index} skipped: {component!r} has {len(ids)} "
            "tasks now (a rebalance lowered its count)"
        )
        logger.warning("%s", note)
        self.skipped.append(note)
        return None

    def _freeze(self, freeze: TaskFreeze) -> None:
        """SIGSTOP a task's process now and SIGCONT that same process later."""
        task_id = self._task_id("--freeze", freeze.component, freeze.index)
        if task_id is None:
            return
        pid = self.cluster.task_pid(task_id)
        if pid is None:
            logger.warning(
                "no process of %s:%s to freeze", freeze.component, freeze.index
            )
            return
        self.kill_times[f"{freeze.component}:{freeze.index}"] = self.clock()
        _signal(pid, signal.SIGSTOP)
        thaw = threading.Timer(freeze.down_s, _signal, (pid, signal.SIGCONT))
        thaw.daemon = True
        thaw.start()

    def inject(
        self,
        kills: Sequence[TaskKill],
        node_kills: Sequence[NodeKill],
        started: float,
        freezes: Sequence[TaskFreeze] = (),
    ) -> None:
        self.started = started
        events: list[tuple[float, Any]] = [(k.at_s, k) for k in kills]
        events += [(k.at_s, k) for k in node_kills]
        events += [(f.at_s, f) for f in freezes]
        for at_s, kill in sorted(events, key=lambda e: e[0]):
            delay = started + at_s - self.clock()
            if delay > 0:
                self._wakeup.wait(delay)
            if isinstance(kill, TaskFreeze):
                self._freeze(kill)
            elif isinstance(kill, TaskKill):
                task_id = self._task_id("--kill", kill.component, kill.index)
                if task_id is None:
                    continue
                self.kill_times[f"{kill.component}:{kill.index}"] = self.clock()
                self.killed_tasks.append((task_id, self.clock()))
                self.cluster.kill_task(task_id)
            else:
                if self.kill_node is None:
                    msg = f"--kill-node {kill.node}: this run cannot kill ring nodes"
                    raise StormBridgeError(msg)
                self.kill_times[f"ring node {kill.node}"] = self.clock()
                self.ring_watch.killing(kill.node)
                self.kill_node(kill.node)

    def final_epoch(self, deadline: float) -> bool:
        """Run until idle with a final epoch committed after every injected failure.

        A killed ring node counts once the registration it had when killed left
        the ring (its ZooKeeper session ended, or a restarted node replaced it)
        and the rollback that caused ran, so a run never ends between the two.
        """
        cluster = self.cluster
        if not self.wait_nodes_handled(deadline):
            return False
        # a killed task is noticed asynchronously: never end before its death
        # was seen (or a rollback already under way recycled it), or the run
        # would report a recovery that never ran
        if not cluster.wait_for(
            functools.partial(_deaths_seen, tuple(self.killed_tasks)),
            max(0.0, deadline - self.clock()),
        ):
            return False
        while self.clock() < deadline:
            if not cluster.run_until_idle(max(0.0, deadline - self.clock())):
                return False
            emits = cluster.spout_emits()
            rebalances = cluster.with_rebalancer(lambda r: len(r.history))
            target = cluster.request_epoch()
            if target is not None and not cluster.wait_for(
                functools.partial(_reached, target), max(0.0, deadline - self.clock())
            ):
                return False
            # every rollback must have resumed: an epoch committed after it
            resumed = cluster.wait_for(
                _all_resumed, min(1.0, max(0.0, deadline - self.clock()))
            )
            # Final when no spout emitted since the epoch was asked for (its
            # barrier follows every tuple counted in ``emits``) and the topology
            # is idle again. Idle is waited for, not sampled: a dry spout is
            # asked for ``next`` every few ms, and a loaded machine made an
            # instant check miss the gaps every time, until the deadline.
            idle = resumed and cluster.run_until_idle(
                min(1.0, max(0.0, deadline - self.clock()))
            )
            # a rebalance taken meanwhile may have held tuples past that epoch
            same = cluster.with_rebalancer(lambda r: len(r.history)) == rebalances
            if idle and same and cluster.spout_emits() == emits:
                return True
        return False


def _native_final(
    run: _Run, store: ZkEpochStore, topology: str, deadline: float
) -> bool:
    """Run until idle with two commits in a row at the same offsets (native mode).

    Two consecutive commits of one generation with equal offsets, the cluster
    idle at both, mean the spouts emitted nothing for a whole interval after
    the first: the second one holds the final state.
    """
    cluster = run.cluster
    if not cluster.wait_for(
        functools.partial(_deaths_seen, tuple(run.killed_tasks)),
        max(0.0, deadline - run.clock()),
    ):
        return False
    seen: tuple[int, Any] | None = None
    while run.clock() < deadline and not cluster.cannot_come_up():
        if cluster.run_until_idle(0.0):
            try:
                record = run.ring.committed(topology)
                control = store.control()
                generation = store.generation()
            except SR3Error as exc:
                if not exc.retriable:
                    raise
                # ZooKeeper restarting: the tasks wait for it too; so do we
                logger.info("native run end: records unreadable for now: %s", exc)
                record = control = None
            if record is not None and control is not None:
                mark = (dict(record.offsets), record.extra.get("generation"))
                steady = (
                    control.phase is Phase.RUNNING
                    and control.generation == generation == mark[1]
                )
                if steady and seen is not None and record.epoch > seen[0]:
                    if seen[1] == mark:
                        return True
                if seen is None or record.epoch > seen[0]:
                    seen = (record.epoch, mark)
        threading.Event().wait(_NATIVE_POLL_S)
    return False


def _deliver_stopped(
    topology: LoadedTopology, conf: Mapping[str, Any], ring: RingAccess
) -> None:
    """Let sinks that write on commit (``KafkaSink``) write the final epoch.

    A run ends right after its last commit, so its sink tasks may stop before
    they wrote that epoch out; a later run would. Sinks declare a
    ``deliver_stopped`` class method for it.
    """
    for name, comp in topology.components.items():
        deliver = getattr(comp.component_cls, "deliver_stopped", None)
        if deliver is None:
            continue
        merged = {**topology.config, **comp.config, **conf}
        merged["topology.name"] = topology.name
        deliver(merged, ring=ring, component=name, tasks=comp.tasks)


def _busy_reason(run: _Run, *, waits_for_nodes: bool) -> str:
    """Why an ``--until-idle`` run did not go idle, for the report.

    Args:
        run: The run.
        waits_for_nodes: Whether its end waits for killed ring nodes to leave
            (:meth:`_Run.final_epoch` does; native mode does not).
    """
    cluster = run.cluster
    if cluster.cannot_come_up():
        return "a task cannot come up (see task_failures)"
    nodes = run.ring_watch.reason(run.started) if waits_for_nodes else None
    return nodes or cluster.busy_reason() or "the final epoch did not commit in time"


def _close_epochs(
    cluster: LocalCluster, clock: Callable[[], float], deadline: float
) -> None:
    """Open no epoch after the final one; let the one in flight commit.

    An epoch opened after the final commit would publish its snapshots and be
    stopped before it commits: manifests no commit references.
    """

    def close(coordinator: Coordinator) -> int | None:
        coordinator.closed = True
        return coordinator.in_flight

    while cluster.with_coordinator(close) is not None and clock() < deadline:
        threading.Event().wait(0.02)


def _deaths_seen(killed: tuple[tuple[int, float], ...], cluster: LocalCluster) -> bool:
    # not from the event log: a chatty task's logs may have pushed the death out
    ends = [cluster.ended_at(task_id) for task_id, _ in killed]
    return all(
        end is not None and end >= at for end, (_, at) in zip(ends, killed, strict=True)
    )


def _all_resumed(cluster: LocalCluster) -> bool:
    recoveries = cluster.with_coordinator(lambda k: list(k.recoveries)) or []
    return all(r.resumed_at is not None for r in recoveries)


def _reached(epoch: int, cluster: LocalCluster) -> bool:
    return int(cluster.with_coordinator(lambda k: k.last_committed) or 0) >= epoch


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
    _check_kills(topology, [*options.kills, *options.freezes])
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
        )
        hooks = _ZkHooks(committer)
        checkpoint = CheckpointSettings(hooks, interval_s, first, timeout_s)
    if options.checkpoints and options.resume:
        # what the resumed epoch holds of a sink's outputs and its writer did
        # not write (a Spark driver that died after the commit) goes out first
        _deliver_stopped(topology, conf, ring)
    cluster = LocalCluster(
        topology,
        conf,
        serializer=options.serializer,
        env={"SR3_NODE_SECRET": config.node.secret},
        checkpoint=checkpoint,
        clock=clock,
    )
    run = _Run(cluster, ring, kill_node, clock)
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
                idle = _native_final(run, store, topology.name, started + limit)
            else:
                idle = run.final_epoch(started + limit)
            if not idle:
                busy = _busy_reason(run, waits_for_nodes=store is None)
                logger.warning("not idle by the end of the run: %s", busy)
            else:
                _close_epochs(cluster, clock, clock() + _SETTLE_S)
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
    finally:
        if live is not None:
            rebalances = live.report()
            live.close()
        metrics.close()
        cluster.stop()
        committer.close()
    if options.checkpoints and idle:
        _deliver_stopped(topology, conf, ring)
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
    )
