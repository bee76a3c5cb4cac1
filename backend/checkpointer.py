"""One stateful task's state and its checkpoints: restore, capture, write.

:class:`OwnerCheckpointer` is what an engine's stateful task holds: the task's
:class:`~sr3.state.KeyedState`, its chain (:mod:`backend.chain` decides FULL or
DELTA) and the handles to write its snapshots to the ring and restore them. A
checkpoint is two steps, so the engine can keep processing while the ring
write runs: :meth:`~OwnerCheckpointer.capture` encodes the changed key groups
between two tuples, :meth:`~OwnerCheckpointer.write` writes them (on any
thread), and :meth:`~OwnerCheckpointer.confirm` forgets what a written
snapshot held. A restore reads the committed epoch; when the component had
another task count then, the task takes the keys its grouping routes to it
(:meth:`backend.restorer.StateRestorer.restore_task`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backend.chain import DELTA, ChainPolicy, Kind, OwnerChain
from backend.keygroup_restore import install_key_groups, restore_assigned
from backend.owners import OwnerId
from backend.rescale import Route
from backend.shard_cache import ShardCache
from sr3.state import KeyedState

if TYPE_CHECKING:
    from backend.access import RingAccess
    from backend.lazy import LoadStats
    from backend.restorer import RestoreReport
    from sr3.snapshot import WriteReport

__all__ = ["Capture", "OwnerCheckpointer"]


@dataclass(frozen=True)
class Capture:
    """A snapshot captured, not yet written.

    Attributes:
        kind: ``full`` or ``delta``.
        blobs: Encoded key groups, ``{key group: blob}``.
        seconds: Time the capture took (encoding, on the task's thread).
    """

    kind: Kind
    blobs: dict[int, bytes]
    seconds: float


class OwnerCheckpointer:
    """One stateful task's keyed state, checkpointed to the ring.

    Args:
        access: Ring and ZooKeeper handles (None: state in memory only).
        owner: The task's owner id.
        tasks: The component's task count.
        key_group_count: G of the component (``sr3.state.key.groups``).
        mechanism: Restore mechanism (``sr3.recovery.mechanism``).
        policy: Chain length bound (``sr3.checkpoint.max.chain.length``).
        route: Where a key belongs after a rescale (:data:`Route`).
        table: The component's key group -> task index table when it is routed
            by key group (``sr3.rebalance.routing = key-groups``): a restore
            takes the key groups it gives this task
            (:func:`backend.keygroup_restore.restore_assigned`). None: Storm's
            fields grouping.
    """

    def __init__(  # noqa: PLR0913 (what one task's checkpoints need)
        self,
        access: RingAccess | None,
        owner: OwnerId,
        *,
        tasks: int,
        key_group_count: int,
        mechanism: str,
        policy: ChainPolicy,
        route: Route,
        table: list[int] | None = None,
    ) -> None:
        self.access = access
        self.owner = owner
        self.name = str(owner)
        self.tasks = tasks
        self.key_group_count = key_group_count
        self.mechanism = mechanism
        self.chain = OwnerChain(policy)
        self.state = KeyedState(key_group_count)
        self._route = route
        self.table = table
        #: shards read by this task's hand-overs (the next batches reuse them)
        self.shards = ShardCache()

    def restore(
        self,
        *,
        lazy: bool = False,
        on_loaded: Callable[[LoadStats], None] | None = None,
    ) -> RestoreReport | None:
        """Install the committed epoch's state of this task; the next snapshot is FULL.

        With ``lazy`` the state is deferred
        (:meth:`~backend.restorer.StateRestorer.restore_lazily`): it returns
        before the key groups arrived, each is fetched when first needed, and
        ``on_loaded`` is called once all have arrived. The next snapshot, being
        FULL, first waits for the rest.

        Returns:
            What the restore read (None: no ring, the state stays empty).

        Raises:
            RecoveryError, ShardNotFoundError: a snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        self.chain.restart()
        access = self.access
        if access is None:
            self.state = KeyedState(self.key_group_count)
            return None
        if self.table is not None:
            self.state, report = restore_assigned(
                access.restorer,
                topology=self.owner.topology,
                component=self.owner.component,
                index=self.owner.index,
                table=self.table,
                record=access.committed(self.owner.topology),
                mechanism=self.mechanism,
                lazy=lazy,
                on_loaded=on_loaded,
            )
            return report
        self.state, report = access.restorer.restore_task(
            topology=self.owner.topology,
            component=self.owner.component,
            index=self.owner.index,
            tasks=self.tasks,
            record=access.committed(self.owner.topology),
            key_group_count=self.key_group_count,
            mechanism=self.mechanism,
            route=self._route,
            lazy=lazy,
            on_loaded=on_loaded,
        )
        return report

    def install_key_groups(self, source: int, epoch: int, key_groups: list[int]) -> int:
        """Take ``key_groups`` from task ``source``'s snapshot at ``epoch`` (hand-over).

        The next snapshot holds them whole (:meth:`KeyedState.write_whole`),
        even a delta. Returns the bytes read.

        Raises:
            RecoveryError, ShardNotFoundError: the snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        access = self.access
        if access is None:
            return 0
        sender = OwnerId(self.owner.topology, self.owner.component, source)
        size = install_key_groups(
            access.restorer, self.state, str(sender), epoch, key_groups, self.shards
        )
        self.state.write_whole(key_groups)
        return size

    def prefetch_key_groups(
        self, source: int, epoch: int, key_groups: list[int]
    ) -> int:
        """Read ``key_groups`` of task ``source``'s snapshot at ``epoch`` ahead.

        The shards stay in :attr:`shards`, so the install of the same key
        groups at a later epoch reads only the shards written since (any
        thread; the state is not touched). Returns the bytes read.

        Raises:
            RecoveryError, ShardNotFoundError: the snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        access = self.access
        if access is None:
            return 0
        sender = OwnerId(self.owner.topology, self.owner.component, source)
        _layers, size = access.restorer.read_key_groups(
            str(sender), epoch, key_groups, self.shards
        )
        return size

    def drop_key_groups(self, key_groups: list[int]) -> int:
        """Forget ``key_groups`` (handed over); return how many of them held state.

        The next snapshot empties them (an empty FULL blob each, even in a delta).
        """
        return self.state.drop_key_groups(key_groups)

    def capture(self) -> Capture:
        """Encode the state for the next snapshot (FULL or DELTA, as the chain says).

        Raises:
            StateError: a value cannot be encoded; the message names key and field.
        """
        started = time.perf_counter()
        kind = self.chain.next_kind()
        blobs = self.state.snapshot(incremental=kind == DELTA)
        self.chain.written(kind)
        return Capture(kind, blobs, time.perf_counter() - started)

    def write(
        self, capture: Capture, epoch: int, offsets: Mapping[str, Any]
    ) -> WriteReport | None:
        """Write a captured snapshot as ``epoch`` and publish its manifest.

        Returns:
            What was written (None: no ring).

        Raises:
            QuorumError: a shard missed its write quorum.
            CoordinationError: the manifest could not be published.
        """
        if self.access is None:
            return None
        return self.access.write(
            owner=self.name,
            epoch=epoch,
            key_group_count=self.key_group_count,
            key_groups=capture.blobs.items(),
            kind=capture.kind,
            offsets=dict(offsets),
        )

    def confirm(self) -> None:
        """Forget the changes the written snapshots held (they are durable)."""
        self.state.mark_clean()
