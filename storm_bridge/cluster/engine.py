"""The local cluster's single-threaded core: Storm's ShellBolt/ShellSpout side.

One thread (holding the cluster lock) feeds :meth:`Engine.handle` what the
subprocess readers decoded (the :class:`Dispatcher` applies it) and runs due
timers. The engine wires the parts
together: the :class:`Supervisor` (spawn, handshake, heartbeats, restarts), the
:class:`SpoutDriver` (one spout command at a time), the :class:`TupleFlow`
(routing, acks, tuple trees) and the :class:`Journal` (events, counters).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.checks import check_runnable
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.context import Router, assign_task_ids
from storm_bridge.cluster.dispatch import Dispatcher
from storm_bridge.cluster.duplicates import Stragglers
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.flow import TupleFlow
from storm_bridge.cluster.forkserver import ForkServer
from storm_bridge.cluster.keygroup_routing import encoded_tables, install_tables
from storm_bridge.cluster.launcher import Launcher
from storm_bridge.cluster.local_wiring import attach_local_recovery
from storm_bridge.cluster.process import ProcessEvent
from storm_bridge.cluster.scopes import RecoveryScope
from storm_bridge.cluster.settings import (
    ClusterOptions,
    TaskSettings,
    component_conf,
    sample_every,
    topology_conf,
)
from storm_bridge.cluster.spouts import SpoutDriver
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.multilang import Serializer
from storm_bridge.straggler import StragglerSettings
from topology_api.barriers import LOCAL_CLUSTER_KEY
from topology_api.errors import TopologyError
from topology_api.outputs import LastOutputs
from topology_api.topology import LoadedTopology

__all__ = ["Engine", "checked_confs"]


def _check_encodable(
    serializer: Serializer, component: str, conf: Mapping[str, Any]
) -> None:
    try:
        serializer.encode(dict(conf))
    except (TypeError, ValueError) as exc:
        msg = (
            f"the Storm conf of component {component!r} cannot be sent with the "
            f"{serializer.name} serializer: {exc}; use plain JSON values"
        )
        raise TopologyError(msg) from exc


def checked_confs(
    topology: LoadedTopology, overrides: Mapping[str, Any], serializer: Serializer
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Return the topology's Storm conf and each component's, checked.

    The checks the cluster makes before any task starts, so that a caller can
    make them before it changes anything (``sr3 run`` before it replaces the
    committed state).

    Raises:
        TopologyError: a conf value has the wrong type or range, cannot be
            sent with ``serializer``, or the topology uses what the cluster
            cannot run (:func:`check_runnable`).
        ConfigError: a sink's ``sr3.output.key.fields`` is invalid.
    """
    check_runnable(topology)
    conf = topology_conf(topology.name, topology.config, overrides)
    TaskSettings.from_conf(conf)
    LastOutputs(topology, conf)
    confs: dict[str, dict[str, Any]] = {}
    for name, component in topology.components.items():
        confs[name] = component_conf(conf, component.config)
        _check_encodable(serializer, name, confs[name])
        TaskSettings.from_conf(confs[name])
    return conf, confs


class Engine:
    """Runs one topology's tasks as multilang subprocesses (not thread-safe).

    Args:
        topology: The loaded topology.
        overrides: Storm conf overriding the topology's ``config``.
        serializer: Multilang serializer of every subprocess.
        bin_dir: Directory holding ``streamparse_run``.
        work_dir: Scratch directory (the pid directory lives under it).
        env: Environment of the subprocesses.
        rng: Source of ids and shuffles.
        clock: Monotonic clock in seconds.
        options: Local-cluster knobs.
        sink: Where subprocess readers post :class:`ProcessEvent` (thread-safe).
        checkpoint: Global checkpoints (epochs, barriers, rollback); None: off.

    Raises:
        TopologyError: the conf has invalid values, or the topology uses what
            the cluster cannot run (:func:`check_runnable`).
        ConfigError: a sink's ``sr3.output.key.fields`` or an
            ``sr3.straggler.*`` value is invalid.
    """

    def __init__(
        self,
        topology: LoadedTopology,
        overrides: Mapping[str, Any],
        *,
        serializer: Serializer,
        bin_dir: Path,
        work_dir: Path,
        env: Mapping[str, str],
        rng: random.Random,
        clock: Callable[[], float],
        options: ClusterOptions,
        sink: Callable[[ProcessEvent], None],
        checkpoint: CheckpointSettings | None = None,
    ) -> None:
        self.conf, confs = checked_confs(topology, overrides, serializer)
        self.topology = topology
        self.options = options
        self.settings = TaskSettings.from_conf(self.conf)
        self.task_to_component = assign_task_ids(topology, self.settings.acker_tasks)
        self.router = Router(
            topology, self.task_to_component, rng=rng, boxing=self.settings.boxing
        )
        self.timers = TimerQueue()
        self.journal = Journal(topology.components, clock, options.max_events)
        #: Last output per key of every sink component (replays overwrite).
        self.outputs = LastOutputs(topology, self.conf)
        self.tasks: dict[int, TaskRuntime] = {}
        for task_id, name in self.task_to_component.items():
            if name in topology.components:
                component = topology.components[name]
                conf = dict(confs[name])
                conf[LOCAL_CLUSTER_KEY] = True  # the sr3.* metrics are read here
                settings = TaskSettings.from_conf(conf)
                self.tasks[task_id] = TaskRuntime(task_id, component, conf, settings)
        #: The bolts each component's tuples reach, directly or through others.
        self._downstream = topology.downstream()
        self.spouts = SpoutDriver(
            clock=clock,
            timers=self.timers,
            idle_max_s=options.spout_idle_max_s,
            backpressured=self._backpressured,
        )
        self.flow = TupleFlow(
            tasks=self.tasks,
            router=self.router,
            counters=self.journal.counters,
            rng=rng,
            acking=self.settings.acker_tasks > 0,
            fail_lost=options.fail_lost_tuples,
            notify_spout=self.spouts.queue,
            clock=clock,
            tree_acked=self.journal.tree_acked,
            sample_every=sample_every(self.settings.stats_sample_rate),
        )
        pid_dir = work_dir / "pids"
        pid_dir.mkdir(parents=True, exist_ok=True)
        self._forks: ForkServer | None = None
        if options.fork_tasks and (bin_dir / "python").exists():
            self._forks = ForkServer(bin_dir, str(topology.path.parent), env)
        launcher = Launcher(
            topology, serializer, bin_dir, pid_dir, env, sink, clock, self._forks
        )
        self.supervisor = Supervisor(
            launcher=launcher,
            task_to_component=self.task_to_component,
            timers=self.timers,
            journal=self.journal,
            flow=self.flow,
            router=self.router,
            spouts=self.spouts,
            rng=rng,
            handshake_timeout_s=options.handshake_timeout_s,
            restart_backoff_s=options.restart_backoff_s,
            restart_backoff_max_s=options.restart_backoff_max_s,
            on_ready=self._task_ready,
            on_death=self._task_died,
        )
        self._clock = clock
        self._quiet_since: float | None = None
        #: Time ``is_idle`` waited only for spouts' quiet periods to pass.
        self.quiet_waited_s = 0.0
        # sr3.rebalance.routing = key-groups: tables set before any task starts
        install_tables(
            topology,
            self.conf,
            self.router,
            self.tasks,
            checkpoint.start_tables if checkpoint is not None else {},
        )
        self.coordinator: Coordinator | None = None
        if checkpoint is not None:
            self.coordinator = Coordinator(
                topology=topology,
                tasks=self.tasks,
                component_tasks=self.router.component_tasks,
                settings=checkpoint,
                timers=self.timers,
                clock=clock,
                queue_spout_command=self.spouts.queue,
                deliver=self.flow.deliver_now,
                recycle=self.supervisor.recycle,
            )
            if self.router.key_groups:
                router = self.router
                self.coordinator.key_group_tables = lambda: encoded_tables(router)
            self.flow.gate = self.coordinator.hold
            self.flow.on_input_done = self.coordinator.input_done
        self._activate_when_ready = True
        self.dispatcher = Dispatcher(self)
        self.stragglers = Stragglers(
            settings=StragglerSettings.from_conf(self.conf),
            tasks=self.tasks,
            component_tasks=self.router.component_tasks,
            timers=self.timers,
            clock=clock,
            journal=self.journal,
            supervisor=self.supervisor,
            coordinator=self.coordinator,
            emit=self.dispatcher.forward_emit,
            settle=self.dispatcher.settle,
        )
        if self.stragglers.logging:
            self.flow.on_delivered = self.stragglers.delivered
        #: Task-scope recovery (None without checkpoints).
        self.local = attach_local_recovery(self, checkpoint, clock)

    def start(self) -> None:
        """Spawn every task; the topology activates once all have shaken hands."""
        for rt in self.tasks.values():
            self.supervisor.spawn(rt)
        self.stragglers.start()
        if self.settings.acker_tasks > 0 and self.settings.message_timeouts:
            period = self.settings.message_timeout_s

            def rotate_acker() -> None:
                self.flow.acker.rotate()
                self.timers.at(self._clock() + period, rotate_acker)

            self.timers.at(self._clock() + period, rotate_acker)

    def stop(self, grace_s: float) -> None:
        """Stop every subprocess (stdin closed, killed after ``grace_s``)."""
        self.spouts.active = False
        self.timers.clear()
        self.stragglers.stop()
        self.supervisor.stop(self.tasks, grace_s)
        if self._forks is not None:
            self._forks.close()

    def kill_task(self, task_id: int) -> None:
        """SIGKILL a task's subprocess, as a crash would; it is then restarted."""
        rt = self.tasks[task_id]
        if rt.process is not None:
            rt.killed = rt.incarnation  # this death is not the task's own
            rt.process.kill()

    def all_ready(self) -> bool:
        """Whether every task has completed its handshake."""
        return all(rt.state is TaskState.RUNNING for rt in self.tasks.values())

    def _task_ready(self) -> None:
        if self.local is not None:
            self.local.task_ready()
        if self._activate_when_ready and self.all_ready():
            self.activate()
        if self.coordinator is not None and self.all_ready():
            self.coordinator.start()

    def _task_died(self, rt: TaskRuntime) -> None:
        self.stragglers.task_died(rt)
        if self.coordinator is not None:
            reason = ""
            if self.local is not None:
                decision = self.local.task_died(rt)
                if decision.scope is RecoveryScope.TASK:
                    return  # only it restarts
                reason = decision.reason
            self.coordinator.task_died(rt, reason)

    def rollback(self, cause: str, reason: str = "") -> None:
        """Roll every task back to the last committed epoch (checkpointing only)."""
        if self.coordinator is not None:
            self.coordinator.rollback(cause, reason=reason)

    def ring_node_left(self, node: str) -> None:
        """A ring node left: roll back, unless task scope lets the topology go on."""
        if self.coordinator is None:
            return
        reason = ""
        if self.local is not None:
            decision = self.local.ring_node_left(node)
            if decision.scope is RecoveryScope.TASK:
                return
            reason = decision.reason
        self.coordinator.rollback(f"ring node {node}", reason=reason)

    @property
    def active(self) -> bool:
        """Whether the topology is active (spouts get ``next`` calls)."""
        return self.spouts.active

    def activate(self) -> None:
        """Activate the topology: spouts get ``activate`` and then ``next`` calls."""
        self._activate_when_ready = False
        if not self.spouts.active:
            self.journal.record(EventKind.ACTIVATED, "", 0, "topology active")
            spouts = [rt for rt in self.tasks.values() if rt.is_spout]
            self.spouts.set_active(True, spouts)

    def deactivate(self) -> None:
        """Deactivate: spouts get ``deactivate`` and no more ``next`` calls."""
        self._activate_when_ready = False
        if self.spouts.active:
            self.journal.record(EventKind.DEACTIVATED, "", 0, "topology inactive")
            spouts = [rt for rt in self.tasks.values() if rt.is_spout]
            self.spouts.set_active(False, spouts)

    def _backpressured(self, spout: TaskRuntime) -> bool:
        """Whether ``spout`` waits: a bolt downstream of it has too much queued.

        As on Storm 2, a congested bolt holds back only what feeds it (there,
        the executors sending to its full queue, and theirs in turn): a spout
        whose tuples never reach it keeps emitting. The upstream-backup logs'
        budget (task-scope recovery) still holds back every spout: only a
        commit trims them.
        """
        if self.local is not None and self.local.over_budget():
            return True
        downstream = self._downstream.get(spout.component.name, frozenset())
        return any(
            rt.process is not None
            and rt.process.outbox_size > rt.settings.shellbolt_max_pending
            for rt in self.tasks.values()
            if not rt.is_spout and rt.component.name in downstream
        )

    # -- messages ----------------------------------------------------------------------

    def handle(self, event: ProcessEvent) -> None:
        """Apply one event from a subprocess reader (see :class:`Dispatcher`)."""
        self.dispatcher.handle(event)

    # -- queries -----------------------------------------------------------------------

    def is_idle(self, empty_nexts: int) -> bool:
        """Whether nothing is in flight and every spout keeps emitting nothing.

        On becoming idle, adds to :attr:`quiet_waited_s` the time the tasks
        were idle but for spouts still inside their quiet period
        (``sr3.idle.quiet.s``).
        """
        reason, quiet = self._busy(empty_nexts)
        now = self._clock()
        since = self._quiet_since
        if since is not None and any(
            rt.dry_since is None or rt.dry_since > since
            for rt in self.tasks.values()
            if rt.is_spout
        ):
            # a spout paused and went on emitting: that pause was part of the run
            since = None
        if reason is None:
            if since is not None:
                self.quiet_waited_s += now - since
            since = None
        elif quiet and since is None:
            since = now
        self._quiet_since = since
        return reason is None

    def busy_reason(self, empty_nexts: int) -> str | None:
        """Why the topology is not idle (None when it is), for ``--until-idle``."""
        return self._busy(empty_nexts)[0]

    def _busy(self, empty_nexts: int) -> tuple[str | None, bool | None]:
        """The reason, and whether spouts are in their quiet period.

        The second value is None when a task is busy (quiet periods then do
        not matter), else whether a spout is still inside its quiet period.
        """
        quiet: str | None = None
        now = self._clock()
        for rt in self.tasks.values():
            where = f"{rt.component.name} task {rt.task_id}"
            if rt.state is not TaskState.RUNNING or rt.process is None:
                return f"{where} is {rt.state.name.lower()}", None
            if rt.is_spout:
                if rt.commands or rt.awaiting not in (None, "next") or len(rt.pending):
                    return (
                        f"{where}: {len(rt.pending)} tuples pending, "
                        f"{len(rt.commands)} commands queued, awaiting {rt.awaiting}"
                    ), None
                if rt.waiting is not None:
                    return f"{where} waits for its source: {rt.waiting}", None
                if self.active and (
                    rt.empty_streak < empty_nexts or rt.awaiting is not None
                ):
                    return f"{where} still emits ({rt.empty_streak} empty nexts)", None
                dry_s = 0.0 if rt.dry_since is None else now - rt.dry_since
                if (
                    self.active
                    and not rt.at_end
                    and dry_s < rt.settings.idle_quiet_s
                    and quiet is None
                ):
                    quiet = (
                        f"{where} emitted nothing for {dry_s:.2f} s, not yet "
                        f"{rt.settings.idle_quiet_s} s (sr3.idle.quiet.s)"
                    )
            elif rt.process.outbox_size or self.flow.busy(rt):
                return f"{where} has tuples in flight", None
        if self.stragglers.racing():
            return "a straggler and its duplicate are racing", None
        if self.coordinator is not None and self.coordinator.busy():
            return "the checkpoint coordinator is busy", quiet is not None
        return quiet, quiet is not None

    def pid_of(self, task_id: int) -> int | None:
        """The pid of a task's current subprocess."""
        rt = self.tasks[task_id]
        return rt.process.pid if rt.process is not None else None
