"""The epoch committer: numbers epochs, commits them, collects what they supersede.

An epoch is committed when its record (:class:`zk.checkpoints.CommitRecord`:
the epoch, the spouts' offsets, every owner with a snapshot at it) is written
in ZooKeeper; a restore reads only committed epochs. Once epoch ``e`` commits,
the manifests of its owners' older epochs (committed ones, and the ones a
rollback left behind) are dropped, in the background; when ``e`` starts a new
chain (a FULL snapshot) the shards no remaining manifest references are
deleted too, records and replicas. Storm's local cluster, Storm's native mode
and the Spark engine all commit through :class:`EpochCommitter`.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from backend.owners import topology_owners
from zk.checkpoints import CommitRecord

if TYPE_CHECKING:
    from backend.access import RingAccess

__all__ = ["EpochCommitter", "next_epoch"]

logger = logging.getLogger(__name__)


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


class EpochCommitter:
    """Commits one topology's epochs and collects the chains they supersede.

    Args:
        access: Open handles on ZooKeeper and the ring.
        topology: The topology name.
        background: Collect on a thread of its own (False: in :meth:`commit`).
    """

    def __init__(
        self, access: RingAccess, topology: str, *, background: bool = True
    ) -> None:
        self._access = access
        self.topology = topology
        self._collector = (
            ThreadPoolExecutor(1, thread_name_prefix="sr3-collect")
            if background
            else None
        )

    def start(self, *, resume: bool = False) -> int:
        """Prepare a run; return the first epoch it opens.

        Without ``resume`` an empty epoch is committed below that first epoch,
        so the run starts from empty state; with it the last committed epoch
        stays, and the run restores its state and seeks its spouts to its
        offsets, continuing exactly once.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        first = next_epoch(self._access, self.topology)
        if not (resume and self.committed() is not None):
            self._access.checkpoints.reset(self.topology, CommitRecord(epoch=first - 1))
        return first

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
