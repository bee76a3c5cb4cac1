"""``StatefulBolt``: a bolt with keyed state checkpointed to the SR3 ring.

While ``process`` runs, ``self.state`` is the dict-like state of the tuple's
key. On the local cluster the bolt snapshots its state when an aligned barrier
arrives; with ``sr3.checkpoint.mode=native`` it follows the ZooKeeper protocol
of :mod:`storm_bridge.native`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from pystorm.component import Tuple as StormTuple
from streamparse import Bolt

from backend.chain import ChainPolicy
from backend.checkpointer import Capture, OwnerCheckpointer
from backend.lazy import LAZY_FETCH, LoadStats
from backend.owners import OwnerId
from sr3.config import Sr3Config
from sr3.errors import RecoveryError, StorageError
from sr3.state import KeyedState, KeyState
from storm_bridge.errors import StormBridgeError
from storm_bridge.messages import GENERATION_KEY
from storm_bridge.native import NATIVE, BoltAgent, checkpoint_mode, require_ring
from storm_bridge.restore_progress import RestoreProgress
from topology_api.barriers import (
    BARRIER_STREAM,
    LOADED_METRIC,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
    task_index,
    with_barrier,
)
from topology_api.contract import StatefulComponent, overrides_state_key
from topology_api.groupings import IntegerBoxing, key_task_index, route_hash

__all__ = ["StateKeyError", "StatefulBolt"]

logger = logging.getLogger(__name__)

_TICK_KEY: Final = "topology.tick.tuple.freq.secs"
#: Shortest time between two reports of dropped stragglers (native mode).
_DROPPED_REPORT_S: Final = 0.1


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

    _sr3_current: KeyState | None = None
    #: Native-mode generation of the tuple read last (None: it carried none).
    _sr3_tag: int | None = None
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
        current = self._sr3_current
        if current is None:
            msg = (
                f"component {self._sr3_component!r} task {self._sr3_task}: "
                "self.state is scoped to a tuple's key; use it inside process()"
            )
            raise StateKeyError(msg)
        return current

    @property
    def keyed_state(self) -> KeyedState:
        """All the keyed state of this task (for iteration and tests)."""
        return self._sr3.state

    @property
    def state_loading(self) -> bool:
        """Whether a lazy restore's state is still arriving from the ring.

        Meanwhile keys are served as usual: a key's key group is fetched when
        first touched (``sr3.recovery.lazy``).
        """
        return self._sr3_progress.loading

    def process_scoped(self, tup: StormTuple, scope: KeyState) -> None:
        """Run ``process(tup)`` with ``self.state`` bound to ``scope``.

        For an engine hosting the bolt outside Storm's run loop (the Spark
        engine looks a key's state up once for all of its tuples): emits are
        anchored to ``tup``, as in the run loop.
        """
        self._current_tups = [tup]
        self._sr3_current = scope
        try:
            self.process(tup)
        finally:
            self._sr3_current = None
            self._current_tups = []

    def grouping_key(self, tup: StormTuple) -> tuple[Any, ...]:
        """Return the values of ``tup``'s fields grouping's fields.

        The default :meth:`state_key`; override that to key state otherwise.

        Raises:
            StateKeyError: the tuple did not arrive through a fields grouping.
        """
        fields = self._sr3_key_fields.get((tup.component, tup.stream))
        if fields is None:
            msg = (
                f"component {self._sr3_component!r} task {self._sr3_task}: tuple "
                f"from {tup.component!r} stream {tup.stream!r} has no key: "
                "subscribe with Grouping.fields(...) or override state_key(tup)"
            )
            raise StateKeyError(msg)
        values = tup.values
        return tuple(values[i] for i in fields)

    def _setup_component(self, storm_conf: Any, context: Any) -> None:
        super()._setup_component(storm_conf, context)
        self._sr3_current = None
        self._sr3_component = str(context["componentid"])
        self._sr3_task = int(context["taskid"])
        self._sr3_topology = str(storm_conf.get("topology.name", ""))
        index, count = task_index(context)
        owner = OwnerId(self._sr3_topology, self._sr3_component, index)
        self._sr3_owner = str(owner)
        self._sr3_key_fields = self._grouping_fields(context)
        # a state key other than the grouping values keeps its route with it,
        # so a rescaled task gets the keys whose tuples it gets
        self._sr3_routed = overrides_state_key(type(self))
        self._sr3_boxing = IntegerBoxing.of(storm_conf)
        self._sr3_failed: BaseException | None = None
        self._sr3_pending: Future[None] | None = None
        self._sr3_writer = ThreadPoolExecutor(1, thread_name_prefix="sr3-snapshot")
        self._sr3_agent: BoltAgent | None = None
        self._sr3_lock = threading.Lock()
        self._sr3_dropped = 0
        from storm_bridge.wiring import RingAccess  # noqa: PLC0415 - ring clients on demand

        ring = RingAccess.from_conf(storm_conf)
        self._sr3_ring = ring
        require_ring(ring, storm_conf, self._sr3_owner)
        settings = Sr3Config.from_mapping(storm_conf, strict=False)
        # Storm's fields grouping (deepHashCode mod tasks) decides which keys a
        # task sees, not key-group ranges: a task may touch any key group, and
        # its snapshot holds exactly the keys routed to it.
        self._sr3 = OwnerCheckpointer(
            ring,
            owner,
            tasks=count,
            key_group_count=settings.ring.key_group_count,
            mechanism=settings.recovery.mechanism,
            policy=ChainPolicy(settings.recovery.max_chain_length),
            # as the router hashes: a rescaled task keeps the keys it gets
            route=functools.partial(
                key_task_index, num_tasks=count, boxing=self._sr3_boxing
            ),
        )
        params: dict[str, Any] = {"owner": self._sr3_owner, "epoch": None}
        # native mode restores on its control thread too: it stays eager
        lazy = settings.recovery.lazy and checkpoint_mode(storm_conf) != NATIVE
        self._sr3_progress = RestoreProgress(self._sr3_owner, lazy=lazy)
        self._sr3_metrics = False  # no metric before the restored one
        report = self._sr3.restore(lazy=lazy, on_loaded=self._sr3_loaded)
        # nothing committed for this task: restored eagerly (empty) after all
        self._sr3_progress.lazy = report is not None and report.used == LAZY_FETCH
        if report is not None:
            params.update(report.to_dict())
        else:
            # No ring (sr3.zk.hosts unset): state lives in memory only.
            params.update(mechanism=self._sr3.mechanism, used="none", shards=0, bytes=0)
        # Real Storm's ShellBolt dies on a metric no Java code registered
        # ("Could not find metric by name"): only the local cluster reads these.
        self._sr3_metrics = checkpoint_mode(storm_conf) != NATIVE
        if self._sr3_metrics:
            self.send_message(
                {"command": "metrics", "name": RESTORED_METRIC, "params": params}
            )
            if self._sr3_ring is not None:
                self._sr3_send_progress(self._sr3_progress.ready())
        if self._sr3_ring is not None and checkpoint_mode(storm_conf) == NATIVE:
            self._sr3_native_setup()

    def _sr3_loaded(self, stats: LoadStats) -> None:
        """The lazy restore's state all arrived (on a background thread)."""
        self._sr3_send_progress(self._sr3_progress.loaded(stats))

    def _sr3_send_progress(self, params: dict[str, Any] | None) -> None:
        if params is not None and self._sr3_metrics:
            self.send_message(
                {"command": "metrics", "name": LOADED_METRIC, "params": params}
            )

    def _sr3_native_setup(self) -> None:
        from storm_bridge.native import OWNER  # noqa: PLC0415 - ring clients on demand
        from zk.epochs import ZkEpochStore  # noqa: PLC0415 - ring clients on demand

        ring = self._sr3_ring
        if ring is None:
            return
        store = ZkEpochStore(ring.session, self._sr3_topology)
        # a restart bumps even before the first control record: the dead
        # process's counts are lost, so the spouts must replay
        bumped = store.register(OWNER, self._sr3_owner)
        agent = BoltAgent(bumped=bumped)
        if bumped:
            agent.min_generation = store.bump_generation()
            logger.info("owner %s restarted: rollback requested", self._sr3_owner)
        self._sr3_store = store
        self._sr3_agent = agent
        #: The last RESTORE report (step, payload, when stragglers were reported).
        self._sr3_restored: tuple[str, dict[str, Any], float] | None = None
        executor = ThreadPoolExecutor(1, thread_name_prefix="sr3-native")

        def changed(control: Any) -> None:
            # watch callbacks run on kazoo's thread: hand the work over
            executor.submit(self._sr3_on_control, control)

        store.watch_control(changed)

    def _sr3_on_control(self, control: Any) -> None:
        """Act on a control record (native mode, on the ``sr3-native`` thread)."""
        agent = self._sr3_agent
        if agent is None:
            return
        with self._sr3_lock:
            action = agent.action(control)
            if action is None:
                return
            try:
                if action == BoltAgent.SNAPSHOT:
                    report = self._sr3_native_snapshot(control)
                else:
                    report = self._sr3_native_restore()
                    self._sr3_restored = (control.step(), report, 0.0)
                self._sr3_store.report(control.step(), self._sr3_owner, report)
            except Exception as exc:
                # the task dies at its next tuple (a heartbeat at the latest),
                # and its restart rolls the topology back
                logger.exception("owner %s: %s failed", self._sr3_owner, action)
                self._sr3_failed = exc
                return
            agent.done(control, action)

    def _sr3_native_snapshot(self, control: Any) -> dict[str, Any]:
        captured = self._sr3.capture()
        written = self._sr3.write(captured, control.epoch, control.offsets)
        self._sr3.confirm()
        return {
            "epoch": control.epoch,
            "kind": captured.kind,
            "key_groups": len(captured.blobs),
            "bytes": 0 if written is None else written.bytes_written,
        }

    def _sr3_native_restore(self) -> dict[str, Any]:
        report = self._sr3.restore()
        if report is None:
            return {}
        logger.info("owner %s restored epoch %s", self._sr3_owner, report.epoch)
        return {**self._sr3_straggler_report(), **report.to_dict()}

    def _sr3_straggler_report(self) -> dict[str, Any]:
        agent = self._sr3_agent
        fenced = agent is not None and agent.fenced
        return {"dropped": self._sr3_dropped, "fenced": fenced}

    def _sr3_route(self, tup: StormTuple) -> int | None:
        """The route to store with ``tup``'s state key (None: the key routes itself)."""
        if not self._sr3_routed:
            return None
        fields = self._sr3_key_fields.get((tup.component, tup.stream))
        if fields is None:  # no fields grouping: any task may see the key
            return None
        values = tup.values
        return route_hash([values[i] for i in fields], self._sr3_boxing)

    @staticmethod
    def _grouping_fields(
        context: Mapping[str, Any],
    ) -> dict[tuple[str, str], list[int]]:
        found: dict[tuple[str, str], list[int]] = {}
        groupings = context.get("source->stream->grouping", {})
        all_fields = context.get("source->stream->fields", {})
        for source, streams in groupings.items():
            for stream, grouping in streams.items():
                if str(grouping.get("type", "")).upper() != "FIELDS":
                    continue
                names = list(all_fields.get(source, {}).get(stream, []))
                found[(source, stream)] = [names.index(f) for f in grouping["fields"]]
        return found

    def read_command(self) -> Any:
        """Read a command from Storm, noting a tuple's native-mode generation."""
        command = super().read_command()
        if isinstance(command, dict) and "tuple" in command:
            tag = command.get(GENERATION_KEY)
            ok = isinstance(tag, int) and not isinstance(tag, bool)
            self._sr3_tag = tag if ok else None
        return command

    def _run(self) -> None:
        failed = self._sr3_failed
        if failed is not None:
            # A lost snapshot must not stall every later epoch: die, so the
            # cluster rolls back (pystorm reports the error, then exits).
            self.exit_on_exception = True
            raise failed
        tup = self.read_tuple()
        if self._sr3_agent is None:
            self._sr3_dispatch(tup)
            return
        with self._sr3_lock:
            stale = self._sr3_straggler(tup)
            if stale is not None:
                if stale == BoltAgent.UNTAGGED:
                    # only these hold the rollback's spouts back (quiet time)
                    self._sr3_dropped += 1
                    self._sr3_report_dropped()
                if self.auto_ack:
                    self.ack(tup)
                return
            self._sr3_dispatch(tup)

    def _sr3_report_dropped(self) -> None:
        """Tell the coordinator stragglers still arrive (at most every 0.1 s).

        It resumes the spouts only once no owner dropped one for a while (see
        :meth:`storm_bridge.native.NativeCoordinator._quiet`).
        """
        restored = self._sr3_restored
        now = time.monotonic()
        if restored is None or now - restored[2] < _DROPPED_REPORT_S:
            return
        step, report, _at = restored
        report = {**report, **self._sr3_straggler_report()}
        self._sr3_restored = (step, report, now)
        self._sr3_store.report(step, self._sr3_owner, report)

    def _sr3_straggler(self, tup: StormTuple) -> str | None:
        """Whether ``tup`` is a straggler of a rolled-back generation (native).

        Returns:
            None (process it) or how it is one (:meth:`BoltAgent.straggler`).
        """
        agent = self._sr3_agent
        if agent is None or tup.stream == BARRIER_STREAM:
            return None
        if self.is_heartbeat(tup) or self.is_tick(tup):
            return None
        latest = functools.partial(self._sr3_store.control, fresh=True)
        return agent.straggler(self._sr3_tag, latest)

    def _sr3_dispatch(self, tup: StormTuple) -> None:
        self._current_tups = [tup]
        if self.is_heartbeat(tup):
            self.send_message({"command": "sync"})
        elif tup.stream == BARRIER_STREAM:
            self._current_tups = []
            try:
                self._checkpoint(tup)
            except Exception:
                self.exit_on_exception = True
                raise
        elif self.is_tick(tup):
            self.process_tick(tup)
            if self.auto_ack:
                self.ack(tup)
        else:
            try:
                current = self._sr3.state.for_key(
                    self.state_key(tup), self._sr3_route(tup)
                )
            except (RecoveryError, StorageError):
                # a lazy restore could not read a key group: the task dies and
                # restores again, as an eager restore that failed would
                self.exit_on_exception = True
                raise
            self._sr3_current = current
            saved = current.saved()
            try:
                self.process(tup)
            except Exception:
                # a tuple that fails leaves no trace in the state: its replay
                # (or the dead-letter policy) starts from the state before it
                current.restore(saved)
                raise
            finally:
                self._sr3_current = None
            if self._sr3_progress.first_pending and self._sr3_ring is not None:
                self._sr3_send_progress(self._sr3_progress.first_tuple())
            if self.auto_ack:
                self.ack(tup)
        self._current_tups = []

    def _checkpoint(self, tup: StormTuple) -> None:
        """Capture the state, forward the barrier, write the snapshot in the background.

        The capture (encoding the changed key groups) happens here, between two
        tuples; the barrier goes downstream at once; the ring write and manifest
        publish run on a writer thread, which reports the snapshot when done. The
        next checkpoint first waits for that write, then forgets what it held.
        """
        epoch, info = int(tup.values[0]), dict(tup.values[1] or {})
        self._sr3_settle()
        owner = self._sr3_owner
        if self._sr3_ring is None:
            self.emit([epoch, {"owner": owner}], stream=BARRIER_STREAM, anchors=[])
            self._sr3_report({"epoch": epoch, "owner": owner, "bytes": 0})
            return
        captured = self._sr3.capture()
        self.emit([epoch, {"owner": owner}], stream=BARRIER_STREAM, anchors=[])
        self._sr3_pending = self._sr3_writer.submit(
            self._sr3_write, epoch, captured, dict(info.get("offsets") or {})
        )

    def _sr3_settle(self) -> None:
        pending, self._sr3_pending = self._sr3_pending, None
        if pending is not None:
            pending.result()
            self._sr3.confirm()

    def _sr3_write(
        self, epoch: int, captured: Capture, offsets: dict[str, Any]
    ) -> None:
        started = time.perf_counter()
        try:
            written = self._sr3.write(captured, epoch, offsets)
        except Exception as exc:
            self._sr3_failed = exc
            raise
        self._sr3_report(
            {
                "epoch": epoch,
                "owner": self._sr3_owner,
                "kind": captured.kind,
                "key_groups": len(captured.blobs),
                "bytes": 0 if written is None else written.bytes_written,
                "capture_s": round(captured.seconds, 6),
                "write_s": round(time.perf_counter() - started, 6),
            }
        )

    def _sr3_report(self, params: dict[str, Any]) -> None:
        if not self._sr3_metrics:
            return
        self.send_message(
            {"command": "metrics", "name": SNAPSHOT_METRIC, "params": params}
        )
