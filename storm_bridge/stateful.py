"""``StatefulBolt``: a bolt with keyed state checkpointed to the SR3 ring.

While ``process`` runs, ``self.state`` is the dict-like state of the tuple's
key. On the local cluster the bolt snapshots its state when an aligned barrier
arrives; with ``sr3.checkpoint.mode=native`` it follows the ZooKeeper protocol
of :mod:`storm_bridge.native`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

from pystorm.component import Tuple as StormTuple
from streamparse import Bolt

from sr3.errors import RecoveryError, StorageError
from storm_bridge.errors import StormBridgeError
from storm_bridge.lineage import Emitted
from storm_bridge.messages import GENERATION_KEY, LINEAGE_KEY
from storm_bridge.native import NATIVE, BoltAgent, checkpoint_mode
from topology_api.barriers import BARRIER_STREAM, KEY_GROUP_STREAM, with_barrier
from topology_api.contract import (
    StatefulComponent,
    is_nondeterministic_class,
    overrides_state_key,
)

if TYPE_CHECKING:
    from sr3.state import KeyedState, KeyState
    from storm_bridge.bolt_runtime import BoltRuntime

__all__ = ["StateKeyError", "StatefulBolt"]

_TICK_KEY: Final = "topology.tick.tuple.freq.secs"


class StateKeyError(StormBridgeError, KeyError):
    """A tuple reached a stateful bolt without a key (no fields grouping)."""


class StatefulBolt(Bolt, StatefulComponent):
    """A bolt with keyed state checkpointed to the SR3 ring.

    Users override ``initialize`` and ``process``. While ``process`` runs,
    ``self.state`` is the dict-like state of the tuple's key: by default the
    values of the fields of the fields grouping feeding the bolt; override
    :meth:`state_key` to choose another. State values must be msgpack-able.

    Component conf: ``sr3.state.key.groups`` (G, default 256, fixed on first
    deployment), ``sr3.recovery.mechanism`` (star, line, tree or auto),
    ``sr3.checkpoint.max.chain.length`` (deltas before a full snapshot),
    ``sr3.recovery.lazy`` (local checkpoint mode: a restored task processes
    before its state arrived; a tuple waits only for its key's key group).

    A tuple whose ``process`` raises is failed and reported with its values; the
    task keeps running (its other keys are unaffected; what ``process`` wrote to
    the key's state before raising is undone). The tuple is then replayed: on
    Storm (native mode) its tree fails back to its spout, which rolls the
    topology back to the last committed epoch, as the local cluster does; after
    :data:`~storm_bridge.native.MAX_REPLAYS` replays a poison tuple is dropped.
    A failed checkpoint (ring write or manifest publish) ends the task instead,
    which rolls the topology back.
    """

    #: SR3's state for this task (set up in the handshake; one attribute, so a
    #: subclass's attributes never clash with ours).
    _sr3: BoltRuntime
    exit_on_exception = False

    @classmethod
    def spec(
        cls, name: Any = None, inputs: Any = None, par: Any = None, config: Any = None
    ) -> Any:
        """Return the streamparse spec, the barrier stream declared.

        Args:
            name: Component id (default: the Topology attribute name).
            inputs: Subscriptions, as for any streamparse bolt.
            par: Parallelism.
            config: Component-specific Storm conf.
        """
        from streamparse.dsl.bolt import ShellBoltSpec  # noqa: PLC0415 - DSL only where declared

        if config and checkpoint_mode(config) == NATIVE and _TICK_KEY not in config:
            # native mode: a tick each second also wakes an idle task up
            config = {**config, _TICK_KEY: 1}
        return ShellBoltSpec(
            cls,
            command="streamparse_run",
            script=f"{cls.__module__}.{cls.__name__}",
            name=name,
            inputs=inputs,
            par=par,
            config=config,
            outputs=with_barrier(cls.outputs),
        )

    @property
    def state(self) -> KeyState:
        """The state of the current tuple's key (only valid inside ``process``).

        Raises:
            StateKeyError: no tuple is being processed.
        """
        runtime = self._sr3
        current = runtime.current
        if current is None:
            msg = (
                f"component {runtime.component!r} task {runtime.task}: "
                "self.state is scoped to a tuple's key; use it inside process()"
            )
            raise StateKeyError(msg)
        return current

    @property
    def keyed_state(self) -> KeyedState:
        """All the keyed state of this task (for iteration and tests)."""
        return self._sr3.checkpointer.state

    @property
    def state_loading(self) -> bool:
        """Whether a lazy restore's state is still arriving from the ring.

        Meanwhile keys are served as usual: a key's key group is fetched when
        first touched (``sr3.recovery.lazy``).
        """
        return self._sr3.progress.loading

    def process_scoped(self, tup: StormTuple, scope: KeyState) -> None:
        """Run ``process(tup)`` with ``self.state`` bound to ``scope``.

        For an engine hosting the bolt outside Storm's run loop (the Spark
        engine looks a key's state up once for all of its tuples): emits are
        anchored to ``tup``, as in the run loop.
        """
        runtime = self._sr3
        self._current_tups = [tup]
        runtime.current = scope
        try:
            self.process(tup)
        finally:
            runtime.current = None
            self._current_tups = []

    def grouping_key(self, tup: StormTuple) -> tuple[Any, ...]:
        """Return the values of ``tup``'s fields grouping's fields.

        The default :meth:`state_key`; override that to key state otherwise.

        Raises:
            StateKeyError: the tuple did not arrive through a fields grouping.
        """
        runtime = self._sr3
        fields = runtime.key_fields.get((tup.component, tup.stream))
        if fields is None:
            msg = (
                f"component {runtime.component!r} task {runtime.task}: tuple "
                f"from {tup.component!r} stream {tup.stream!r} has no key: "
                "subscribe with Grouping.fields(...) or override state_key(tup)"
            )
            raise StateKeyError(msg)
        values = tup.values
        return tuple(values[i] for i in fields)

    def _setup_component(self, storm_conf: Any, context: Any) -> None:
        super()._setup_component(storm_conf, context)
        # the runtime (ring client, lazy restore, checkpoints) loads only in a
        # stateful bolt's task: a spout's or plain bolt's never imports it
        from storm_bridge.bolt_runtime import BoltRuntime  # noqa: PLC0415 - on demand

        # all of SR3's state for this task, under one attribute (see its module)
        self._sr3 = BoltRuntime.start(
            storm_conf,
            context,
            routed=overrides_state_key(type(self)),
            send=self.send_message,
            nondeterministic=is_nondeterministic_class(type(self)),
        )

    def read_command(self) -> Any:
        """Read a command from Storm, noting a tuple's native-mode generation."""
        command = super().read_command()
        if isinstance(command, dict) and "tuple" in command:
            tag = command.get(GENERATION_KEY)
            ok = isinstance(tag, int) and not isinstance(tag, bool)
            self._sr3.tag = tag if ok else None
            lineage = command.get(LINEAGE_KEY)
            ok = isinstance(lineage, int) and not isinstance(lineage, bool)
            self._sr3.lineage = lineage if ok else None
        return command

    def send_message(self, message: Any) -> None:
        """Send ``message`` to Storm; keep a data emit's values under task scope.

        While a tuple is processed under ``sr3.recovery.scope=task`` (native
        mode), each emit is kept with the lineage it got, to be sent again if
        the tuple is replayed (:mod:`storm_bridge.lineage`).
        """
        runtime: BoltRuntime | None = getattr(self, "_sr3", None)
        if runtime is None:
            super().send_message(message)
            return
        emit = (
            isinstance(message, dict)
            and message.get("command") == "emit"
            and message.get("stream") != BARRIER_STREAM
        )
        if emit and runtime.reemit is not None:
            message[LINEAGE_KEY] = runtime.reemit
        super().send_message(message)
        if emit and runtime.capture is not None:
            lineage = message.get(LINEAGE_KEY)
            runtime.capture.append(
                Emitted(
                    values=list(message.get("tuple") or []),
                    stream=message.get("stream"),
                    direct_task=message.get("task"),
                    lineage=lineage if isinstance(lineage, int) else None,
                )
            )

    def _run(self) -> None:
        runtime = self._sr3
        failed = runtime.failed
        if failed is not None:
            # A lost snapshot must not stall every later epoch: die, so the
            # cluster rolls back (pystorm reports the error, then exits).
            self.exit_on_exception = True
            raise failed
        tup = self.read_tuple()
        if runtime.agent is None:
            self._sr3_dispatch(tup)
            return
        with runtime.lock:
            data = not (
                tup.stream == BARRIER_STREAM
                or self.is_heartbeat(tup)
                or self.is_tick(tup)
            )
            stale = runtime.straggler() if data else None
            if stale is not None:
                if stale == BoltAgent.UNTAGGED:
                    # only these hold the rollback's spouts back (quiet time)
                    runtime.dropped += 1
                    runtime.report_dropped()
                # acked whatever auto_ack says: the bolt never sees it, and
                # its tree would otherwise hold a max.spout.pending slot
                # until topology.message.timeout.secs
                self.ack(tup)
                return
            if data and runtime.dedupe is not None:
                self._sr3_dispatch_once(tup)
                return
            self._sr3_dispatch(tup)

    def _sr3_dispatch_once(self, tup: StormTuple) -> None:
        """Process a data tuple unless its lineage was processed (task scope).

        A replayed tuple this task already processed is not processed again:
        what it emitted the first time is emitted again, anchored on the
        replay, for a restored task downstream (the others drop it in turn).
        """
        runtime = self._sr3
        dedupe = runtime.dedupe
        lineage = runtime.lineage
        if dedupe is None or lineage is None:
            if dedupe is not None:
                dedupe.untraced()
            self._sr3_dispatch(tup)
            return
        done = dedupe.emits(lineage)
        if done is not None:
            for emitted in done:
                runtime.reemit = emitted.lineage
                try:
                    self.emit(
                        emitted.values,
                        stream=emitted.stream,
                        anchors=[tup],
                        direct_task=emitted.direct_task,
                    )
                finally:
                    runtime.reemit = None
            # acked whatever auto_ack says: the bolt never sees the duplicate,
            # and its replayed tree must complete
            self.ack(tup)
            runtime.replays_progress()
            return
        runtime.capture = []
        try:
            self._sr3_dispatch(tup)
            dedupe.record(lineage, runtime.capture)
        finally:
            runtime.capture = None

    def _sr3_dispatch(self, tup: StormTuple) -> None:
        runtime = self._sr3
        self._current_tups = [tup]
        if self.is_heartbeat(tup):
            self.send_message({"command": "sync"})
        elif tup.stream == BARRIER_STREAM:
            self._current_tups = []
            epoch, info = int(tup.values[0]), dict(tup.values[1] or {})
            forward = functools.partial(self._sr3_forward, epoch)
            try:
                runtime.checkpoint(epoch, dict(info.get("offsets") or {}), forward)
            except Exception:
                self.exit_on_exception = True
                raise
        elif tup.stream == KEY_GROUP_STREAM:
            self._current_tups = []
            try:
                runtime.key_group_command(str(tup.values[0]), dict(tup.values[1]))
            except Exception:
                self.exit_on_exception = True
                raise
        elif self.is_tick(tup):
            self.process_tick(tup)
            if self.auto_ack:
                self.ack(tup)
        else:
            try:
                current = runtime.checkpointer.state.for_key(
                    self.state_key(tup), runtime.route(tup)
                )
            except (RecoveryError, StorageError):
                # a lazy restore could not read a key group: the task dies and
                # restores again, as an eager restore that failed would
                self.exit_on_exception = True
                raise
            runtime.current = current
            saved = current.saved()
            try:
                self.process(tup)
            except Exception:
                # a tuple that fails leaves no trace in the state: its replay
                # (or the dead-letter policy) starts from the state before it
                current.restore(saved)
                raise
            finally:
                runtime.current = None
            runtime.first_tuple_done()
            if self.auto_ack:
                self.ack(tup)
        self._current_tups = []

    def _sr3_forward(self, epoch: int, info: dict[str, Any]) -> None:
        """Forward a barrier downstream, unanchored."""
        self.emit([epoch, info], stream=BARRIER_STREAM, anchors=[])
