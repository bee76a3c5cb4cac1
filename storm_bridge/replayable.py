"""``ReplayableSpout``: a spout whose emits carry offsets, so it can replay.

With ``sr3.checkpoint.mode=native`` (a real Storm cluster) it runs the ZooKeeper
protocol of :mod:`storm_bridge.native` itself; on the local cluster it answers
the coordinator's barrier commands.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from streamparse import Spout

from sr3.config import CheckpointConfig
from storm_bridge.errors import StormBridgeError
from storm_bridge.generation_field import field_on, lineages_on, warmup_emit
from storm_bridge.lineage import root
from storm_bridge.messages import GENERATION_KEY, LINEAGE_KEY
from storm_bridge.native import NATIVE, checkpoint_mode, require_ring
from topology_api.barriers import (
    BARRIER_COMMAND,
    BARRIER_STREAM,
    END_OF_INPUT_METRIC,
    LOCAL_CLUSTER_KEY,
    WAITING_METRIC,
    task_index,
    with_barrier,
)
from topology_api.contract import ReplayableComponent

__all__ = ["ReplayableSpout", "SpoutRuntime"]

logger = logging.getLogger(__name__)

_COORDINATOR_POLL_S: Final = 0.02


@dataclass
class SpoutRuntime:
    """Everything SR3 holds for one :class:`ReplayableSpout` task.

    One object under one attribute (``self._sr3``), so a subclass's attributes
    never clash with ours.

    Attributes:
        name: The task's offset key, ``component/index``.
        start_offset: The committed epoch's offset for this task (None: none).
        start_epoch: The committed epoch (None: nothing committed).
        offset: The offset of the last emit.
        sought: Whether the first ``seek`` ran.
        agent: Native mode's control agent (None on the local cluster).
        ring: Native mode's ring access.
        store: Native mode's epoch store.
        topology: The topology's name (native mode).
        local: Whether the task runs on our local cluster (it reads the
            ``sr3.waiting`` metric; real Storm would die on it).
        waiting: What the spout last said it waits for (None: nothing).
        at_end: Whether the spout said its input is at its end and has not
            emitted since.
        lineages: Whether emits carry lineages (real Storm, native mode, the
            hidden field on: :mod:`storm_bridge.lineage`).
        lineage: The lineage of the emit being sent (None: none).
        at_offset: The offset of the last emit and the emits at it so far.
    """

    name: str
    start_offset: Any = None
    start_epoch: int | None = None
    offset: Any = None
    sought: bool = False
    agent: Any = None
    ring: Any = None
    store: Any = None
    topology: str = ""
    local: bool = False
    waiting: str | None = None
    at_end: bool = False
    lineages: bool = False
    lineage: int | None = None
    at_offset: tuple[Any, int] = (None, 0)

    def next_lineage(self, offset: Any) -> int | None:
        """Return the lineage of an emit at ``offset`` (None: no offset, or off)."""
        if not self.lineages or offset is None:
            return None
        last, n = self.at_offset
        n = n + 1 if last == offset else 0
        self.at_offset = (offset, n)
        return root(self.name, offset, n)


class ReplayableSpout(Spout, ReplayableComponent):
    """A spout whose emits carry offsets, so it can replay from a committed one.

    Users implement :meth:`seek` and ``next_tuple`` and emit with
    ``self.emit(values, offset=n)``. On start (and after every rollback) the
    spout is sought to the offset of the last committed epoch, or to None when
    nothing was committed; ``seek`` runs after ``initialize``.
    """

    #: SR3's state for this task (None until the handshake; see SpoutRuntime).
    _sr3: SpoutRuntime | None = None

    @classmethod
    def spec(cls, name: Any = None, par: Any = None, config: Any = None) -> Any:
        """Return the streamparse spec, the barrier stream declared.

        Args:
            name: Component id (default: the Topology attribute name).
            par: Parallelism.
            config: Component-specific Storm conf.
        """
        from streamparse.dsl.spout import ShellSpoutSpec  # noqa: PLC0415 - DSL only where declared

        return ShellSpoutSpec(
            cls,
            command="streamparse_run",
            script=f"{cls.__module__}.{cls.__name__}",
            name=name,
            par=par,
            config=config,
            outputs=with_barrier(cls.outputs),
        )

    def emit(
        self,
        tup: Any,
        offset: Any = None,
        tup_id: Any = None,
        stream: Any = None,
        direct_task: Any = None,
        need_task_ids: bool = False,
    ) -> Any:
        """Emit ``tup``; ``offset`` (msgpack-able, increasing) marks its position.

        In native checkpoint mode the emit gets a message id, so Storm tracks its
        tree (``tup_id``, if given, is what ``ack``/``fail`` receive).
        """
        runtime = self._sr3
        agent = None if runtime is None else runtime.agent
        if runtime is not None and agent is not None and stream != BARRIER_STREAM:
            if agent.skips(offset):
                # a poison tuple: its rollback replays everything but it, and
                # Storm's spouts ack what they give up on (storm-kafka-client)
                runtime.offset = offset
                if tup_id is not None:
                    self.ack(tup_id)
                return [] if need_task_ids else None
            tup_id = agent.track(tup_id, offset)
        if offset is not None and runtime is not None:
            runtime.offset = offset
        if runtime is not None and stream != BARRIER_STREAM:
            runtime.at_end = False  # the local cluster sees the emit too
            runtime.lineage = runtime.next_lineage(offset)
        try:
            return super().emit(
                tup,
                tup_id=tup_id,
                stream=stream,
                direct_task=direct_task,
                need_task_ids=need_task_ids,
            )
        finally:
            if runtime is not None:
                runtime.lineage = None

    def waiting_for_source(self, reason: str | None) -> None:
        """Say the spout waits for its source (``reason``), or no longer does (None).

        A spout whose source is down (a Kafka broker, a socket) emits nothing,
        as one at the end of its input does, and ``sr3 run --until-idle`` would
        end the run on it. A waiting spout is not dry: the run goes on, and its
        reason is what the run says it is busy with. Call it from
        ``next_tuple`` when the source stops or starts answering; only a change
        is sent, and only on the local cluster (real Storm and Spark have no
        end of input to tell it from).
        """
        runtime = self._sr3
        if runtime is None or not runtime.local:
            return
        if (runtime.waiting is None) == (reason is None):
            return
        runtime.waiting = reason
        self.send_message(
            {"command": "metrics", "name": WAITING_METRIC, "params": {"reason": reason}}
        )

    def end_of_input(self) -> None:
        """Say the spout's input is at its end: nothing more comes unless it replays.

        ``sr3 run --until-idle`` waits ``sr3.idle.quiet.s`` (2 s) of empty
        ``next_tuple`` calls before it takes a spout for dry, since a spout may
        pause without saying so. A spout that knows its input is finite (a file
        read to its end, a fixed list) calls this from ``next_tuple`` when it
        finds nothing left, and the run ends as soon as nothing is in flight and
        a final epoch committed, as a bounded source ends a Flink job. An emit
        afterwards (a rollback seeks back and replays) takes it back; call it
        again at the new end. Only the first call after an emit is sent, and
        only on the local cluster (real Storm and Spark have their own ends).
        """
        runtime = self._sr3
        if runtime is None or not runtime.local or runtime.at_end:
            return
        runtime.at_end = True
        self.send_message(
            {"command": "metrics", "name": END_OF_INPUT_METRIC, "params": {"end": True}}
        )

    def send_message(self, message: Any) -> None:
        """Send ``message`` to Storm; a native-mode emit carries its generation.

        The generation (:data:`~storm_bridge.messages.GENERATION_KEY`) lets
        every owner tell a tuple of a rolled-back tree from a new one
        (:meth:`storm_bridge.native_agents.BoltAgent.stale`).
        """
        runtime = self._sr3
        agent = None if runtime is None else runtime.agent
        if (
            agent is not None
            and isinstance(message, dict)
            and message.get("command") == "emit"
            and message.get("stream") != BARRIER_STREAM
        ):
            message = {**message, GENERATION_KEY: agent.emit_generation}
            if runtime is not None and runtime.lineage is not None:
                message[LINEAGE_KEY] = runtime.lineage
        super().send_message(message)

    def _setup_component(self, storm_conf: Any, context: Any) -> None:
        super()._setup_component(storm_conf, context)
        index, _count = task_index(context)
        runtime = SpoutRuntime(
            name=f"{context['componentid']}/{index}",
            local=bool(storm_conf.get(LOCAL_CLUSTER_KEY)),
            lineages=lineages_on(storm_conf),
        )
        from storm_bridge.wiring import RingAccess  # noqa: PLC0415 - ring clients on demand

        ring = RingAccess.from_conf(storm_conf)
        require_ring(ring, storm_conf, runtime.name)
        native = ring is not None and checkpoint_mode(storm_conf) == NATIVE
        if ring is not None:
            try:
                record = ring.committed(str(storm_conf["topology.name"]))
            finally:
                if not native:
                    ring.close()
            if record is not None:
                runtime.start_epoch = record.epoch
                runtime.start_offset = record.offsets.get(runtime.name)
        self._sr3 = runtime
        if native and ring is not None:
            self._sr3_native_setup(runtime, ring, storm_conf, index)

    def _sr3_native_setup(
        self, runtime: SpoutRuntime, ring: Any, storm_conf: Any, index: int
    ) -> None:
        from backend.committer import EpochCommitter  # noqa: PLC0415 - ring on demand
        from storm_bridge.native import (  # noqa: PLC0415 - ring clients on demand
            SPOUT,
            SpoutAgent,
        )
        from storm_bridge.native_coordinator import (  # noqa: PLC0415 - ring clients on demand
            CoordinatorThread,
            NativeCoordinator,
        )
        from zk.epochs import ZkEpochStore  # noqa: PLC0415 - ring clients on demand

        topology = str(storm_conf["topology.name"])
        store = ZkEpochStore(ring.session, topology)
        # a restart bumps even before the first control record: the dead
        # process may have emitted trees the owners counted
        bumped = store.register(SPOUT, runtime.name)
        agent = SpoutAgent(
            name=runtime.name, bumped=bumped, fenced=field_on(storm_conf)
        )
        if bumped:
            agent.min_generation = store.bump_generation()
            logger.info("spout %s restarted: rollback requested", runtime.name)
        runtime.ring = ring
        runtime.store = store
        runtime.topology = topology
        store.watch_control(agent.on_control)
        runtime.agent = agent
        if index == 0:
            checkpoints = CheckpointConfig.from_mapping(storm_conf)
            coordinator = NativeCoordinator(
                store=store,
                log=EpochCommitter(ring, topology, retain=checkpoints.retain),
                topology=topology,
                interval_s=checkpoints.interval_s,
                timeout_s=checkpoints.timeout_s,
                clock=time.monotonic,
                quiet_s=checkpoints.rollback_quiet_s,
                scope=checkpoints.recovery_scope,
            )
            CoordinatorThread(
                store=store,
                coordinator=coordinator,
                name=runtime.name,
                poll_s=_COORDINATOR_POLL_S,
            ).start()

    def _sr3_native_next(self, runtime: SpoutRuntime) -> None:
        """``next`` in native mode: emit, or hold still and report (module doc)."""
        from zk.epochs import Phase  # noqa: PLC0415 - ring clients on demand

        agent = runtime.agent
        control = agent.control
        # nothing is emitted before the first control record: a task starting
        # late would otherwise emit during a PAUSE or SNAPSHOT it missed, into
        # a snapshot whose commit lacks its offset
        if control is None or control.generation < agent.min_generation:
            return
        if (
            agent.generation is None
            and not agent.bumped
            and not agent.requested
            and not agent.rewinding(control)
        ):
            agent.follow(control.generation)
        if agent.rewinds(control):
            self._sr3_rewind(runtime)
            agent.follow(control.generation)
        if control.phase is Phase.RUNNING:
            if not agent.requested:
                self.next_tuple()
            return
        if not agent.may_report(control):
            return
        step = control.step()
        ready = control.phase is Phase.ROLLBACK or (
            control.phase is Phase.PAUSE and agent.generation == control.generation
        )
        if ready and agent.report_once(step):
            if control.phase is Phase.ROLLBACK and agent.fenced:
                # over every connection between workers before the spouts
                # resume: Storm drops the first sends to a relaunched worker
                self.send_message(warmup_emit(control.generation))
            runtime.store.report(step, runtime.name, {"offset": runtime.offset})

    def _sr3_request_rollback(self, runtime: SpoutRuntime) -> None:
        """Ask for the rollback a failed tree needs (native mode, see its module)."""
        agent = runtime.agent
        ask, seen = agent.take_rollback()
        if not ask:
            return
        generation = runtime.store.request_rollback(seen)
        agent.min_generation = max(agent.min_generation, generation)
        logger.info(
            "spout %s: a tree of generation %s failed; rollback %s requested",
            runtime.name,
            seen,
            generation,
        )

    def _sr3_rewind(self, runtime: SpoutRuntime) -> None:
        """Seek to the committed epoch's offset (a rollback ended)."""
        record = runtime.ring.committed(runtime.topology)
        offset = None if record is None else record.offsets.get(runtime.name)
        self.seek(offset)
        runtime.offset = offset
        runtime.at_offset = (None, 0)  # the replay's lineages start over
        runtime.agent.reset()
        logger.info("spout %s rewound to offset %r", runtime.name, offset)

    def _run(self) -> None:
        runtime = self._sr3
        if runtime is None:
            msg = f"spout {type(self).__name__} ran before its Storm handshake"
            raise StormBridgeError(msg)
        if not runtime.sought:
            runtime.sought = True
            self.seek(runtime.start_offset)
            runtime.offset = runtime.start_offset
        cmd = self.read_command()
        command = cmd["command"]
        agent = runtime.agent
        if command == BARRIER_COMMAND:
            info = {"offset": runtime.offset, "spout": runtime.name}
            Spout.emit(self, [cmd["id"], info], stream=BARRIER_STREAM)
        elif command == "next":
            if agent is None:
                self.next_tuple()
            else:
                self._sr3_native_next(runtime)
        elif command == "ack":
            if agent is None:
                self.ack(cmd["id"])
            else:
                user_id = agent.acked(cmd["id"])
                if user_id is not None:
                    self.ack(user_id)
        elif command == "fail":
            if agent is None:
                self.fail(cmd["id"])
            else:
                user_id = agent.failed(cmd["id"])
                self._sr3_request_rollback(runtime)
                if user_id is not None:
                    self.fail(user_id)
        elif command == "activate":
            self.activate()
        elif command == "deactivate":
            self.deactivate()
        else:
            self.logger.error("Received invalid command from Storm: %r", cmd)
        self.send_message({"command": "sync"})
