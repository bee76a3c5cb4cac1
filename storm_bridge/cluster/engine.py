"""The local cluster's single-threaded core: Storm's ShellBolt/ShellSpout side.

One thread (holding the cluster lock) feeds :meth:`Engine.handle` what the
subprocess readers decoded and runs due timers. The engine wires the parts
together: the :class:`Supervisor` (spawn, handshake, heartbeats, restarts), the
:class:`SpoutDriver` (one spout command at a time), the :class:`TupleFlow`
(routing, acks, tuple trees) and the :class:`Journal` (events, counters).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.cluster.checks import check_runnable
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.context import Router, assign_task_ids
from storm_bridge.cluster.duplicates import Stragglers
from storm_bridge.cluster.events import EventKind, Journal
from storm_bridge.cluster.flow import TupleFlow
from storm_bridge.cluster.launcher import Launcher
from storm_bridge.cluster.local_wiring import attach_local_recovery
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.cluster.scopes import RecoveryScope
from storm_bridge.cluster.settings import (
    ClusterOptions,
    TaskSettings,
    component_conf,
    topology_conf,
)
from storm_bridge.cluster.spouts import SpoutDriver
from storm_bridge.cluster.supervisor import Supervisor
from storm_bridge.cluster.tasks import TaskRuntime, TaskState, TimerQueue
from storm_bridge.components import (
    BARRIER_STREAM,
    LOADED_METRIC,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
)
from storm_bridge.errors import MultilangProtocolError, TaskExitedError
from storm_bridge.messages import (
    LOG_LEVELS,
    SYSTEM_COMPONENT,
    ShellMsg,
    parse_shell_msg,
)
from storm_bridge.multilang import Serializer
from storm_bridge.native import MAX_REPLAYS
from storm_bridge.straggler import StragglerSettings
from topology_api.errors import TopologyError
from topology_api.outputs import LastOutputs
from topology_api.topology import LoadedTopology

__all__ = ["Engine", "checked_confs"]

logger = logging.getLogger(__name__)
task_logger = logging.getLogger("storm_bridge.tasks")

_REAP_WAIT_S: Final = 1.0
#: Distinct failed tuples whose replays are counted (for the poison limit).
_FAILED_TUPLES_KEPT: Final = 10_000
_PY_LEVELS: Final = {
    0: 5,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}
_COMMON_COMMANDS: Final = frozenset({"log", "error", "metrics"})
#: A racing straggler's commands that go through its race.
_RACED_COMMANDS: Final = frozenset({"emit", "ack", "fail", "sync"})


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


def _last_line(text: str) -> str:
    """The last non-blank line of a reported error (a traceback's exception)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


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
                settings = TaskSettings.from_conf(conf)
                self.tasks[task_id] = TaskRuntime(task_id, component, conf, settings)
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
        )
        pid_dir = work_dir / "pids"
        pid_dir.mkdir(parents=True, exist_ok=True)
        launcher = Launcher(topology, serializer, bin_dir, pid_dir, env, sink, clock)
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
            self.flow.gate = self.coordinator.hold
            self.flow.on_input_done = self.coordinator.input_done
        self._activate_when_ready = True
        #: (component, repr(values)) -> failures of a tuple by stateful bolts.
        self._failed_tuples: dict[tuple[str, str], int] = {}
        self.stragglers = Stragglers(
            settings=StragglerSettings.from_conf(self.conf),
            tasks=self.tasks,
            component_tasks=self.router.component_tasks,
            timers=self.timers,
            clock=clock,
            journal=self.journal,
            supervisor=self.supervisor,
            coordinator=self.coordinator,
            emit=self._forward_emit,
            settle=self._settle,
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

    def _backpressured(self) -> bool:
        if self.local is not None and self.local.over_budget():
            return True
        return any(
            rt.process is not None
            and rt.process.outbox_size > rt.settings.shellbolt_max_pending
            for rt in self.tasks.values()
            if not rt.is_spout
        )

    # -- messages ----------------------------------------------------------------------

    def handle(self, event: ProcessEvent) -> None:
        """Apply one event from a subprocess reader."""
        if event.incarnation < 0:
            # a straggler's duplicate (its own event, or the task's once it won)
            mine = self.stragglers.copy_event(event)
            if mine is None:
                return
            event = mine
        rt = self.tasks.get(event.task_id)
        if rt is None or event.incarnation != rt.incarnation:
            return
        if rt.state not in (TaskState.STARTING, TaskState.RUNNING):
            return
        if event.kind == "eof":
            code = last = None
            if rt.process is not None:
                code = rt.process.reap(_REAP_WAIT_S)
                last = rt.process.last_stderr_line(_REAP_WAIT_S)
            # the last stderr line of a Python task is its uncaught exception;
            # pystorm's run loop logs and reports it to the cluster instead
            if not last and rt.last_error:
                last = _last_line(rt.last_error)
            detail = f"subprocess exited with status {code}" + (
                f": {last}" if last else ""
            )
            error = TaskExitedError(rt.component.name, rt.task_id, detail)
            self.supervisor.die(rt, error, exited=True)
            return
        try:
            if event.kind == "error":
                raise event.payload
            rt.last_heard = event.at
            if rt.state is TaskState.STARTING:
                self.supervisor.ready(rt, event.payload)
                return
            msg = parse_shell_msg(
                event.payload, component=rt.component.name, task_id=rt.task_id
            )
            if msg.command in _COMMON_COMMANDS:
                self._common(rt, msg)
            elif rt.is_spout:
                self._spout_message(rt, msg)
            else:
                self._bolt_message(rt, msg)
        except MultilangProtocolError as exc:
            self.journal.counters[rt.component.name].errors += 1
            self._record(EventKind.PROTOCOL_ERROR, rt, exc.detail)
            self.supervisor.die(rt, exc)

    def _record(self, kind: EventKind, rt: TaskRuntime, text: str, **data: Any) -> None:
        self.journal.record(kind, rt.component.name, rt.task_id, text, **data)

    def _common(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        name, task, text = rt.component.name, rt.task_id, msg.msg or ""
        if msg.command == "log":
            level = _PY_LEVELS.get(msg.level, logging.INFO)
            if level >= logging.ERROR:
                # pystorm logs an exception that ends its run loop at ERROR
                rt.last_error = text
            task_logger.log(level, "component %s task %s: %s", name, task, text)
            self._record(
                EventKind.LOG, rt, text, level=LOG_LEVELS.get(msg.level, "INFO")
            )
        elif msg.command == "error":
            rt.last_error = text
            self.journal.counters[name].errors += 1
            task_logger.error("component %s task %s reported: %s", name, task, text)
            self._record(EventKind.COMPONENT_ERROR, rt, text)
        else:
            metric, params = msg.metric_name or "", msg.metric_params
            if self.coordinator is not None:
                if metric == RESTORED_METRIC:
                    if self.local is None or not self.local.restored(rt, params):
                        self.coordinator.restored(rt, params)
                elif metric == SNAPSHOT_METRIC:
                    self.coordinator.snapshot_written(rt, params)
                elif metric == LOADED_METRIC:
                    self.coordinator.restore_progress(rt, params)
            task_logger.debug(
                "component %s task %s metric %s: %r", name, task, metric, params
            )
            self._record(EventKind.METRICS, rt, metric, params=params)

    def _bolt_message(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        rt.heard_back()
        barrier = msg.command == "emit" and msg.stream == BARRIER_STREAM
        race = self.stragglers.race_of(rt)
        if race is not None and msg.command in _RACED_COMMANDS and not barrier:
            if msg.command == "sync":
                self._synced(rt)
            self.stragglers.original_message(race, msg)
        elif barrier:
            if self.coordinator is not None:
                self.coordinator.bolt_barrier(rt, list(msg.values))
        elif msg.command == "emit":
            self._forward_emit(rt, msg, rt.process)
        elif msg.command in ("ack", "fail"):
            self._settle(rt, msg)
        elif msg.command == "sync":
            self._synced(rt)
        elif self.options.strict_commands:
            raise MultilangProtocolError(
                rt.component.name,
                rt.task_id,
                f"Unknown command received: {msg.command!r}",
            )

    def _forward_emit(
        self, rt: TaskRuntime, msg: ShellMsg, reply_to: TaskProcess | None
    ) -> None:
        """Route a bolt's emit; answer ``need_task_ids`` to ``reply_to``."""
        if self.local is not None and self.local.emit(rt, msg, reply_to):
            return  # forwarded before the task failed
        task_ids = self.flow.bolt_emit(rt, msg)
        if self.local is not None:
            self.local.forwarded(rt, msg, task_ids)
        self.outputs.add(rt.component.name, msg.stream, msg.values)
        if task_ids is not None and reply_to is not None:
            reply_to.send(task_ids, urgent=True)

    def _settle(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        """Ack or fail a bolt's input (a failed stateful input rolls back)."""
        if self.local is not None and self.local.settled(rt, msg.msg_id):
            return  # settled by the task's previous incarnation
        if msg.command == "ack":
            self.flow.bolt_ack(rt, msg)
            return
        failed = rt.inputs.get(msg.msg_id) if isinstance(msg.msg_id, str) else None
        self.flow.bolt_fail(rt, msg)
        if failed is not None:
            self._replay_failed(rt, failed)

    def _synced(self, rt: TaskRuntime) -> None:
        rt.heartbeat_answered()
        if self.flow.on_input_done is not None:
            # a tick it never acks may be all a barrier waited for
            self.flow.on_input_done(rt)

    def _replay_failed(self, rt: TaskRuntime, failed: PendingInput) -> None:
        """Replay a tuple a stateful bolt failed (raised on) by a rollback.

        Local checkpoints only: replayable spouts emit without message ids
        there, so the tree of a failed tuple does not fail back to a spout to
        be replayed, as on Storm; the last committed epoch is restored and
        replayed instead. A tuple failed more than :data:`MAX_REPLAYS` times
        (a poison tuple) is dropped, as native mode drops it. A tuple of a
        reliable plain spout fails back to it as on Storm.
        """
        coordinator = self.coordinator
        if coordinator is None or not rt.component.stateful or failed.anchors:
            return
        if failed.source == SYSTEM_COMPONENT or not coordinator.rolls_back:
            return
        name = rt.component.name
        mark = (name, repr(failed.values))
        count = self._failed_tuples.pop(mark, 0) + 1
        self._failed_tuples[mark] = count  # newest last
        if len(self._failed_tuples) > _FAILED_TUPLES_KEPT:
            # forget the tuple failed longest ago: a long run of distinct bad
            # tuples must not grow the engine without bound
            del self._failed_tuples[next(iter(self._failed_tuples))]
        if count > MAX_REPLAYS:
            logger.error(
                "component %s failed %r %s times (a poison tuple): dropped",
                name,
                failed.values,
                count,
            )
            return
        index = self.router.component_tasks(name).index(rt.task_id)
        cause = f"{name}:{index} failed a tuple"
        coordinator.rollback(cause, name, index, rt.task_id)

    def _spout_message(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        if msg.command == "sync":
            rt.heard_back()
            if self.coordinator is not None:
                self.coordinator.spout_synced(rt)
            self.spouts.synced(rt)
        elif msg.command == "emit" and msg.stream == BARRIER_STREAM:
            if self.coordinator is not None:
                self.coordinator.spout_barrier(rt, list(msg.values))
        elif msg.command == "emit":
            if self.local is not None and self.local.emit(rt, msg, rt.process):
                rt.emitted_in_command += 1
                return  # forwarded before the spout failed
            task_ids = self.flow.spout_emit(rt, msg)
            if self.local is not None:
                self.local.forwarded(rt, msg, task_ids)
            self.outputs.add(rt.component.name, msg.stream, msg.values)
            if task_ids is not None and rt.process is not None:
                rt.process.send(task_ids, urgent=True)
        else:
            raise MultilangProtocolError(
                rt.component.name,
                rt.task_id,
                f"Unknown command received: {msg.command!r}",
            )

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
                if self.active and (
                    rt.empty_streak < empty_nexts or rt.awaiting is not None
                ):
                    return f"{where} still emits ({rt.empty_streak} empty nexts)", None
                dry_s = 0.0 if rt.dry_since is None else now - rt.dry_since
                if self.active and dry_s < rt.settings.idle_quiet_s and quiet is None:
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
