"""The epoch committer: numbers epochs, commits them, collects what they supersede.

An epoch is committed when its record (:class:`zk.checkpoints.CommitRecord`:
the epoch, the spouts' offsets, every owner with a snapshot at it) is written
in ZooKeeper; a restore reads only committed epochs. Once epoch ``e`` commits,
the manifests of its owners' older epochs (committed ones, and the ones a
rollback left behind) are dropped, in the background; when ``e`` starts a new
chain (a FULL snapshot) the shards no remaining manifest references are
deleted too, records and replicas. Storm's local cluster, Storm's native mode
and the Spark engine all commit through :class:`EpochCommitter`.

A run may also start from an earlier record (:class:`StartPoint`: a savepoint,
see :mod:`zk.savepoints`, or an epoch whose manifests still exist): the
committer *rewinds*, committing a new epoch above every published one that
carries the earlier record's offsets and owners, its owners' manifests copied
to the new epoch; the run then resumes from it as ``--resume`` does. The
record a start point names is looked up and checked in :mod:`backend.start_records`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from backend.owners import component_owners, topology_owners
from backend.start_records import (
    check_restorable,
    epoch_record,
    missing_owners,
    savepoint_record,
)
from sr3.errors import ConfigError, CoordinationError
from zk.checkpoints import CommitRecord
from zk.savepoints import Savepoint

if TYPE_CHECKING:
    from backend.access import RingAccess

__all__ = [
    "EpochCommitter",
    "StartPoint",
    "check_fixed",
    "next_epoch",
    "start_record",
    "take_savepoint",
]

logger = logging.getLogger(__name__)

E_NO_COMMIT = (
    "topology {topology!r} has no committed epoch to take a savepoint of; run it "
    "first (sr3 run FILE), or check --lab/--zk and the topology name (the "
    "topology file's stem)"
)
E_RACED = (
    "topology {topology!r}: epoch {epoch} was collected while savepoint {name!r} "
    "was taken (a newer epoch committed meanwhile; missing: {missing}); nothing "
    "was kept: run sr3 savepoint create again"
)

E_FIXED = (
    "component {component!r} of topology {topology!r} committed epoch {epoch} "
    "with {before} task(s) and would start from it with {after}: {why}, so its "
    "task count stays across runs. Give it {before} task(s) again (its "
    "parallelism in the topology file, or the environment's with -e ENV), or "
    "start without --resume (and without a savepoint or epoch) from empty state"
)


def check_fixed(
    record: CommitRecord, topology: str, fixed: Mapping[str, tuple[int, str]]
) -> None:
    """Refuse to start ``fixed`` components from ``record`` at another task count.

    Args:
        record: The committed record a run starts from.
        topology: The topology name.
        fixed: ``{component: (tasks now, why the count is fixed)}``.

    Raises:
        ConfigError: a component's task owners in ``record`` are not as many as
            its tasks now (owners of another writer, e.g. a Spark run's, do not
            count).
    """
    for component, (tasks, why) in sorted(fixed.items()):
        before = len(component_owners(record.owners, topology, component))
        if before and before != tasks:
            msg = E_FIXED.format(
                component=component,
                topology=topology,
                epoch=record.epoch,
                before=before,
                after=tasks,
                why=why,
            )
            raise ConfigError(msg)


@dataclass(frozen=True)
class StartPoint:
    """An earlier record a run starts from instead of the last committed one.

    Exactly one of the attributes is set.

    Attributes:
        savepoint: The name of a savepoint of the topology.
        epoch: An epoch whose manifests still exist: the committed one or a
            savepoint's.

    Raises:
        ConfigError: none or both are set.
    """

    savepoint: str | None = None
    epoch: int | None = None

    def __post_init__(self) -> None:
        if (self.savepoint is None) == (self.epoch is None):
            msg = "start from a savepoint or an epoch: give exactly one of them"
            raise ConfigError(msg)

    def __str__(self) -> str:
        if self.savepoint is not None:
            return f"savepoint {self.savepoint!r}"
        return f"epoch {self.epoch}"


def next_epoch(access: RingAccess, topology: str) -> int:
    """Return the first epoch above every epoch committed or published for ``topology``.

    A new run numbers its epochs from there, so it never writes a manifest at
    an epoch a crashed run published without committing.

    Raises:
        CoordinationError: ZooKeeper failed.
    """
    record = access.checkpoints.committed(topology)
    floor = 0 if record is None else record.epoch
    for owner in topology_owners(access.manifests.owners(), topology):
        epochs = access.manifests.epochs(owner)
        if epochs:
            floor = max(floor, epochs[-1])
    return floor + 1


def take_savepoint(
    access: RingAccess, topology: str, name: str | None = None
) -> Savepoint:
    """Record ``topology``'s committed epoch as a savepoint, pinned against GC.

    Args:
        access: Open handles on ZooKeeper and the ring.
        topology: The topology name.
        name: The savepoint's name (default ``sp-<epoch>``).

    Raises:
        ConfigError: nothing is committed, or the epoch was collected meanwhile
            (nothing kept: take it again).
        CoordinationError: the name is taken, or ZooKeeper failed.
    """
    record = access.checkpoints.committed(topology)
    if record is None:
        raise ConfigError(E_NO_COMMIT.format(topology=topology))
    name = f"sp-{record.epoch}" if name is None else name
    point = access.savepoints.create(topology, name, record)
    # pinned now; the epoch's manifests must still be there (a newer commit's
    # collection may have dropped them between the read and the pin)
    missing = missing_owners(access, record)
    if missing:
        access.savepoints.delete(topology, name)
        msg = E_RACED.format(
            topology=topology, epoch=record.epoch, name=name, missing=missing
        )
        raise ConfigError(msg)
    logger.info("savepoint %s of %s pins epoch %s", name, topology, record.epoch)
    return point


def start_record(
    access: RingAccess,
    topology: str,
    point: StartPoint,
    components: Collection[str] | None = None,
) -> CommitRecord:
    """Return the record ``point`` names, checked to be restorable.

    Args:
        access: Open handles on ZooKeeper and the ring.
        topology: The topology name.
        point: The savepoint or epoch.
        components: The topology's stateful components now (None: not checked).

    Raises:
        ConfigError: no such savepoint (or another topology's), the epoch was
            collected, or the record holds state of components the topology no
            longer has; the message names what exists.
        CoordinationError: ZooKeeper failed.
    """
    if point.savepoint is not None:
        record = savepoint_record(access, topology, point.savepoint)
    else:
        assert point.epoch is not None  # noqa: S101 (StartPoint checks it)
        record = epoch_record(access, topology, point.epoch)
    check_restorable(access, topology, record, what=str(point), components=components)
    return record


class EpochCommitter:
    """Commits one topology's epochs and collects the chains they supersede.

    Args:
        access: Open handles on ZooKeeper and the ring.
        topology: The topology name.
        background: Collect on a thread of its own (False: in :meth:`commit`).
        retain: Committed epochs kept restorable, the last one included
            (``sr3.checkpoint.retain``): each commit is also kept among the
            ``retain`` newest, and collections keep their epochs.
    """

    def __init__(
        self,
        access: RingAccess,
        topology: str,
        *,
        background: bool = True,
        retain: int = 1,
    ) -> None:
        self._access = access
        self.topology = topology
        self._retain = retain
        self._collector = (
            ThreadPoolExecutor(1, thread_name_prefix="sr3-collect")
            if background
            else None
        )

    def start(
        self,
        *,
        resume: bool = False,
        start_from: StartPoint | None = None,
        components: Collection[str] | None = None,
        fixed: Mapping[str, tuple[int, str]] | None = None,
    ) -> int:
        """Prepare a run; return the first epoch it opens.

        Without ``resume`` an empty epoch is committed below that first epoch,
        so the run starts from empty state; with it the last committed epoch
        stays, and the run restores its state and seeks its spouts to its
        offsets, continuing exactly once. With ``start_from`` (which implies
        ``resume``) the committer first rewinds to that record (:meth:`rewind`).

        Args:
            resume: Continue from the last committed epoch.
            start_from: Continue from a savepoint or an earlier epoch.
            components: The topology's stateful components, checked against
                ``start_from``'s owners.
            fixed: ``{component: (tasks, why)}`` of components whose task count
                must match the record started from (:func:`check_fixed`).

        Raises:
            ConfigError: ``start_from`` cannot be restored, or a fixed
                component's task count changed (nothing changed).
            CoordinationError: ZooKeeper failed.
        """
        if start_from is not None:
            record = start_record(self._access, self.topology, start_from, components)
            check_fixed(record, self.topology, fixed or {})
            self.rewind(record, start_from)
            return next_epoch(self._access, self.topology)
        first = next_epoch(self._access, self.topology)
        committed = self.committed() if resume else None
        if committed is not None:
            check_fixed(committed, self.topology, fixed or {})
        if not (resume and committed is not None):
            self._access.checkpoints.reset(self.topology, CommitRecord(epoch=first - 1))
        return first

    def rewind(self, record: CommitRecord, point: StartPoint | None = None) -> int:
        """Commit ``record``'s state again as a new epoch; return that epoch.

        The new epoch is above every epoch published for the topology (a later
        run never writes at an epoch number in use). Each of ``record``'s owners
        gets a copy of its manifest at the new epoch, listing the same chain of
        shards; the commit carries ``record``'s offsets and owners, so a run
        resuming from it restores that state and seeks its spouts there.

        Raises:
            CoordinationError: a manifest of ``record`` is gone, or ZooKeeper
                failed (copies published before stay unreferenced by any commit
                and go with the next collection).
        """
        access = self._access
        epoch = next_epoch(access, self.topology)
        for owner in record.owners:
            manifest = access.manifests.manifest(owner, record.epoch)
            extra = {**manifest.extra, "copied_from": record.epoch}
            copy = replace(manifest, epoch=epoch, extra=extra)
            access.manifests.publish(copy, [])
        extra = {"rewound_from": record.epoch}
        if point is not None and point.savepoint is not None:
            extra["savepoint"] = point.savepoint
        rewound = CommitRecord(
            epoch=epoch,
            offsets=record.offsets,
            owners=record.owners,
            extra=extra,
            key_groups=record.key_groups,
        )
        try:
            access.checkpoints.commit(self.topology, rewound)
        except CoordinationError as exc:
            msg = (
                f"topology {self.topology!r}: could not start from epoch "
                f"{record.epoch} ({exc}); is another run of it going on?"
            )
            raise CoordinationError(msg) from exc
        logger.info(
            "topology %s rewound to epoch %s as epoch %s",
            self.topology,
            record.epoch,
            epoch,
        )
        return epoch

    def committed(self) -> CommitRecord | None:
        """Return the last committed epoch.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        return self._access.checkpoints.committed(self.topology)

    def commit(self, record: CommitRecord) -> None:
        """Commit ``record``'s epoch, then collect what it supersedes.

        Raises:
            CoordinationError: ZooKeeper failed; nothing was committed.
        """
        self._access.checkpoints.commit(self.topology, record)
        if self._retain > 1:
            self._access.checkpoints.retain(self.topology, record, self._retain)
        if self._collector is None:
            self.collect(record.epoch, record.owners)
        else:
            self._collector.submit(self.collect, record.epoch, record.owners)

    def collect(self, epoch: int, owners: tuple[str, ...] | list[str]) -> None:
        """Drop what committed ``epoch`` made unreachable for ``owners``.

        Failures are logged, not raised: what is kept is only garbage.
        """
        self._access.collect_committed(owners, epoch)

    def close(self) -> None:
        """Wait for the collections under way."""
        if self._collector is not None:
            self._collector.shutdown(wait=True)
