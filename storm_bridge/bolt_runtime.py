"""``BoltRuntime``: everything SR3 holds for one :class:`StatefulBolt` task.

A stateful bolt keeps its SR3 state in one object under one attribute
(``self._sr3``), not in attributes of the user's class: a subclass may name its
own attributes as it likes, and the instance's namespace holds the user's
state only. The runtime owns the task's checkpointer, its restore progress, the
background snapshot writer and the local cluster's key-group hand-overs; its base
class :class:`~storm_bridge.bolt_native.NativeControl` (native mode) acts on
ZooKeeper's control records through the task's control agent.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pystorm.component import Tuple as StormTuple

from backend.chain import ChainPolicy
from backend.checkpointer import Capture, OwnerCheckpointer
from backend.lazy import LAZY_FETCH, LoadStats
from backend.owners import OwnerId
from sr3.config import Sr3Config
from sr3.keygroups import decode_table
from sr3.state import KeyState
from storm_bridge.bolt_native import NativeControl
from storm_bridge.lineage import Dedupe, Emitted
from storm_bridge.native import NATIVE, BoltAgent, checkpoint_mode, require_ring
from storm_bridge.native_scope import TASK, order_reason
from storm_bridge.restore_progress import RestoreProgress
from topology_api.barriers import (
    KEY_GROUP_TABLE_KEY,
    KEY_GROUPS_METRIC,
    LOADED_METRIC,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
    task_index,
)
from topology_api.java_hash import IntegerBoxing, key_task_index, route_hash

__all__ = ["BoltRuntime", "grouping_fields"]

logger = logging.getLogger(__name__)

#: Sends one multilang message to Storm (the bolt's ``send_message``).
Send = Callable[[dict[str, Any]], None]


def grouping_fields(context: Mapping[str, Any]) -> dict[tuple[str, str], list[int]]:
    """Return (source, stream) -> indexes of its fields grouping's fields."""
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


class BoltRuntime(NativeControl):
    """The SR3 side of one stateful bolt task, built by :meth:`start`.

    Native mode's control records, stragglers and their reports are its base
    class's (:class:`~storm_bridge.bolt_native.NativeControl`).

    Attributes:
        component: The bolt's component id.
        task: Its Storm task id.
        owner: The task's owner id (the checkpointer's, as a string).
        checkpointer: The task's :class:`OwnerCheckpointer` (its keyed state).
        progress: The restore's progress (lazy restores report it).
        current: The state of the key being processed (None between tuples).
        tag: Native-mode generation of the tuple read last (None: none).
        failed: A checkpoint failure the task dies of at its next tuple.
        agent: Native mode's control agent (None on the local cluster).
        lock: Held while a tuple is processed or a control record acted on.
        dropped: Native-mode stragglers dropped so far.
    """

    def __init__(
        self,
        storm_conf: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        routed: bool,
        send: Send,
        nondeterministic: bool = False,
    ) -> None:
        """Set the task up (no ring I/O: :meth:`start` restores).

        Args:
            storm_conf: The handshake's Storm conf.
            context: The handshake's context.
            routed: Whether the bolt's state key is not its grouping values (a
                key then keeps its route with it, so a rescaled task gets the
                keys whose tuples it gets).
            send: Sends a multilang message to Storm.
            nondeterministic: The class declares ``sr3_nondeterministic``.
        """
        self.current: KeyState | None = None
        self.tag: int | None = None
        self.component = str(context["componentid"])
        self.task = int(context["taskid"])
        self.topology = str(storm_conf.get("topology.name", ""))
        index, count = task_index(context)
        self.owner_id = OwnerId(self.topology, self.component, index)
        self.owner = str(self.owner_id)
        self.key_fields = grouping_fields(context)
        self.routed = routed
        self.boxing = IntegerBoxing.of(storm_conf)
        self.failed: BaseException | None = None
        self.pending: Future[None] | None = None
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="sr3-snapshot")
        self.agent: BoltAgent | None = None
        #: a key-groups hand-over's pre-fetch (the receiver reads ahead)
        self.prefetcher: ThreadPoolExecutor | None = None
        self.prefetched: Future[None] | None = None
        self.lock = threading.Lock()
        self.dropped = 0
        self.native = checkpoint_mode(storm_conf) == NATIVE
        self.store: Any = None
        #: The last RESTORE report (step, payload, when stragglers were reported).
        self.restored: tuple[str, dict[str, Any], float] | None = None
        self._send = send
        from storm_bridge.wiring import RingAccess  # noqa: PLC0415 - ring clients on demand

        ring = RingAccess.from_conf(storm_conf)
        self.ring = ring
        require_ring(ring, storm_conf, self.owner)
        settings = Sr3Config.from_mapping(storm_conf, strict=False)
        # key-group routing (sr3.rebalance.routing): the cluster gives the table
        raw_table = storm_conf.get(KEY_GROUP_TABLE_KEY)
        table = (
            None
            if raw_table is None
            else decode_table(json.loads(raw_table), settings.ring.key_group_count)
        )
        # Storm's fields grouping (deepHashCode mod tasks) decides which keys a
        # task sees, not key-group ranges: a task may touch any key group, and
        # its snapshot holds exactly the keys routed to it.
        self.checkpointer = OwnerCheckpointer(
            ring,
            self.owner_id,
            tasks=count,
            key_group_count=settings.ring.key_group_count,
            mechanism=settings.recovery.mechanism,
            policy=ChainPolicy(settings.recovery.max_chain_length),
            # as the router hashes: a rescaled task keeps the keys it gets
            route=functools.partial(
                key_task_index, num_tasks=count, boxing=self.boxing
            ),
            table=table,
        )
        #: Native mode under task scope: what this task processed since the
        #: last commit, to drop replays of it (:mod:`storm_bridge.lineage`).
        self.dedupe = (
            Dedupe(settings.checkpoint.recovery_buffer_bytes)
            if self.native and settings.checkpoint.recovery_scope == TASK
            else None
        )
        #: Where this task reports the replays it awaits (None: it awaits none).
        self.replays_step: str | None = None
        #: Lineage of the tuple read last (None: none).
        self.lineage: int | None = None
        #: The emits of the tuple being processed (while one is kept).
        self.capture: list[Emitted] | None = None
        #: The lineage an emit is sent again under (a replay's duplicate).
        self.reemit: int | None = None
        #: Why this task alone could not be restored exactly (None: it could).
        self.order = order_reason(
            self.component, context, nondeterministic=nondeterministic
        )
        # native mode restores on its control thread too: it stays eager
        self.lazy = settings.recovery.lazy and not self.native
        self.progress = RestoreProgress(self.owner, lazy=self.lazy)
        self.metrics = False  # no metric before the restored one

    @classmethod
    def start(
        cls,
        storm_conf: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        routed: bool,
        send: Send,
        nondeterministic: bool = False,
    ) -> BoltRuntime:
        """Set a task up and restore its state (the bolt's handshake step)."""
        runtime = cls(
            storm_conf,
            context,
            routed=routed,
            send=send,
            nondeterministic=nondeterministic,
        )
        runtime._restore()
        return runtime

    def _restore(self) -> None:
        params: dict[str, Any] = {"owner": self.owner, "epoch": None}
        report = self.checkpointer.restore(lazy=self.lazy, on_loaded=self._loaded)
        # nothing committed for this task: restored eagerly (empty) after all
        self.progress.lazy = report is not None and report.used == LAZY_FETCH
        if report is not None:
            params.update(report.to_dict())
        else:
            # No ring (sr3.zk.hosts unset): state lives in memory only.
            params.update(
                mechanism=self.checkpointer.mechanism, used="none", shards=0, bytes=0
            )
        # Real Storm's ShellBolt dies on a metric no Java code registered
        # ("Could not find metric by name"): only the local cluster reads these.
        self.metrics = not self.native
        if self.metrics:
            self._send(
                {"command": "metrics", "name": RESTORED_METRIC, "params": params}
            )
            if self.ring is not None:
                self.send_progress(self.progress.ready())
        if self.ring is not None and self.native:
            self._native_setup()

    def _loaded(self, stats: LoadStats) -> None:
        """The lazy restore's state all arrived (on a background thread)."""
        self.send_progress(self.progress.loaded(stats))

    def send_progress(self, params: dict[str, Any] | None) -> None:
        """Report the restore's progress (the local cluster reads it)."""
        if params is not None and self.metrics:
            self._send({"command": "metrics", "name": LOADED_METRIC, "params": params})

    def first_tuple_done(self) -> None:
        """A tuple was processed: report the first one after a restore."""
        if self.progress.first_pending and self.ring is not None:
            self.send_progress(self.progress.first_tuple())

    def route(self, tup: StormTuple) -> int | None:
        """The route to store with ``tup``'s state key (None: the key routes itself)."""
        if not self.routed:
            return None
        fields = self.key_fields.get((tup.component, tup.stream))
        if fields is None:  # no fields grouping: any task may see the key
            return None
        values = tup.values
        return route_hash([values[i] for i in fields], self.boxing)

    # -- local cluster key-group hand-overs -----------------------------------

    def key_group_command(self, action: str, info: Mapping[str, Any]) -> None:
        """Install or drop key groups as the cluster's hand-over says; report it.

        ``install``: read ``key_groups`` from task ``source``'s snapshot at
        ``epoch`` (the switch epoch: durable at the sender, perhaps not yet
        committed); ``drop``: forget them. Either way the next snapshot writes
        them whole. A failure raises: the task dies and the cluster rolls back.
        """
        key_groups = [int(kg) for kg in info.get("key_groups", ())]
        if action == "postpone":  # a sender: receivers read its chain next
            self.checkpointer.chain.postpone()
            return
        if action == "prefetch":
            # while this task processes: read the batch's shards ahead
            if self.prefetcher is None:
                self.prefetcher = ThreadPoolExecutor(
                    1, thread_name_prefix="sr3-prefetch"
                )
            self.prefetched = self.prefetcher.submit(
                self._prefetch, int(info["source"]), int(info["epoch"]), key_groups
            )
            return
        started = time.perf_counter()
        # no settle: this task's write of the switch epoch may still run (a
        # receiver is only known to have captured it). That write holds the
        # blobs its capture encoded; what the install marks whole goes into
        # the next capture, which settles first.
        prefetched, self.prefetched = self.prefetched, None
        if prefetched is not None:
            prefetched.exception()  # its failure only means a full read now
        if action == "install":
            size = self.checkpointer.install_key_groups(
                int(info["source"]), int(info["epoch"]), key_groups
            )
        else:
            self.checkpointer.drop_key_groups(key_groups)
            size = 0
        if self.metrics:
            params = {
                "id": info.get("id"),
                "action": action,
                "key_groups": len(key_groups),
                "bytes": size,
                "seconds": round(time.perf_counter() - started, 6),
            }
            self._send(
                {"command": "metrics", "name": KEY_GROUPS_METRIC, "params": params}
            )

    def _prefetch(self, source: int, epoch: int, key_groups: list[int]) -> None:
        """Read a batch ahead (on the ``sr3-prefetch`` thread); report the bytes."""
        started = time.perf_counter()
        try:
            size = self.checkpointer.prefetch_key_groups(source, epoch, key_groups)
        except Exception:  # the install reads what is missing then
            logger.warning("owner %s: pre-fetch failed", self.owner, exc_info=True)
            return
        if self.metrics:
            params = {
                "action": "prefetch",
                "key_groups": len(key_groups),
                "bytes": size,
                "seconds": round(time.perf_counter() - started, 6),
            }
            self._send(
                {"command": "metrics", "name": KEY_GROUPS_METRIC, "params": params}
            )

    # -- local cluster barriers -----------------------------------------------

    def checkpoint(self, epoch: int, offsets: dict[str, Any], forward: Send) -> None:
        """Capture the state, forward the barrier, write the snapshot in the background.

        The capture (encoding the changed key groups) happens here, between two
        tuples; the barrier goes downstream at once (``forward`` emits it); the
        ring write and manifest publish run on a writer thread, which reports the
        snapshot when done. The next checkpoint first waits for that write,
        then forgets what it held.
        """
        self._settle()
        owner = self.owner
        if self.ring is None:
            forward({"owner": owner})
            self._report({"epoch": epoch, "owner": owner, "bytes": 0})
            return
        captured = self.checkpointer.capture()
        forward({"owner": owner})
        self.pending = self.writer.submit(self._write, epoch, captured, offsets)

    def _settle(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()
            self.checkpointer.confirm()

    def _write(self, epoch: int, captured: Capture, offsets: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            written = self.checkpointer.write(captured, epoch, offsets)
        except Exception as exc:
            self.failed = exc
            raise
        self._report(
            {
                "epoch": epoch,
                "owner": self.owner,
                "kind": captured.kind,
                "key_groups": len(captured.blobs),
                "bytes": 0 if written is None else written.bytes_written,
                "capture_s": round(captured.seconds, 6),
                "write_s": round(time.perf_counter() - started, 6),
            }
        )

    def _report(self, params: dict[str, Any]) -> None:
        if self.metrics:
            self._send(
                {"command": "metrics", "name": SNAPSHOT_METRIC, "params": params}
            )
