"""One ``sr3 run``'s failure schedule and the detection of its end.

:class:`TaskKill`, :class:`TaskFreeze` and :class:`NodeKill` are the failures a
run injects; :class:`RunSession` holds one run's cluster, injects them on time,
handles a ring node leaving (a rollback, or under task scope the open epoch
given up), and waits for a final epoch committed after
every one (:meth:`RunSession.final_epoch`; :func:`native_final` in native
mode). :func:`deliver_stopped` lets sinks that write on commit write that final
epoch. :func:`storm_bridge.runner.run_topology` drives it all.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sr3.errors import SR3Error
from storm_bridge.cluster import LocalCluster
from storm_bridge.cluster.checkpoints import Coordinator
from storm_bridge.errors import StormBridgeError
from storm_bridge.ringwatch import RingWatch
from storm_bridge.wiring import RingAccess
from topology_api.topology import LoadedTopology
from zk.epochs import Phase, ZkEpochStore

__all__ = [
    "NodeKill",
    "RunSession",
    "TaskFreeze",
    "TaskKill",
    "busy_reason",
    "check_kills",
    "close_epochs",
    "deliver_stopped",
    "native_final",
]

logger = logging.getLogger(__name__)

_NATIVE_POLL_S: Final = 0.05


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


def _signal(pid: int, sig: int) -> None:
    """Signal a task's process; one that died meanwhile is left alone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        logger.info("task process %s ended before signal %s", pid, sig)


def check_kills(
    topology: LoadedTopology, kills: Sequence[TaskKill | TaskFreeze]
) -> None:
    """Refuse a kill or freeze of a component or task index the topology lacks."""
    for kill in kills:
        problem = topology.task_problem(kill.component, kill.index)
        if problem is not None:
            msg = f"--kill {kill.component}:{kill.index}: {problem}"
            raise StormBridgeError(msg)


class RunSession:
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
        """Act on every registration leaving the ring, rejoins included.

        Under ``sr3.recovery.scope = global`` the topology rolls back; under
        ``task`` it goes on (:func:`~storm_bridge.cluster.scopes.decide_ring_scope`).
        """
        self.ring_watch.start()

    def _node_left(self, node: str) -> None:
        cause = f"ring node {node}"
        if self.cluster.with_coordinator(lambda c: c.rolls_back):
            try:
                self.cluster.ring_node_left(node)
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
        """Inject the kills and freezes at their times into the run, in order."""
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


def native_final(
    run: RunSession, store: ZkEpochStore, topology: str, deadline: float
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


def deliver_stopped(
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


def busy_reason(run: RunSession, *, waits_for_nodes: bool) -> str:
    """Why an ``--until-idle`` run did not go idle, for the report.

    Args:
        run: The run.
        waits_for_nodes: Whether its end waits for killed ring nodes to leave
            (:meth:`RunSession.final_epoch` does; native mode does not).
    """
    cluster = run.cluster
    if cluster.cannot_come_up():
        return "a task cannot come up (see task_failures)"
    nodes = run.ring_watch.reason(run.started) if waits_for_nodes else None
    return nodes or cluster.busy_reason() or "the final epoch did not commit in time"


def close_epochs(
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
