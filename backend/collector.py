"""Collection of the epochs and shards a commit supersedes, sparing pinned epochs.

After a commit, :class:`ChainCollector` drops each owner's manifests the
committed epoch made unreachable and, when that epoch starts a new chain, the
shards no remaining manifest references. Epochs a savepoint pins, and the
commits ``sr3.checkpoint.retain`` keeps restorable, stay with every shard they
list.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from backend.owners import owner_topology
from sr3.errors import SR3Error
from sr3.ports import DropGuard
from sr3.snapshot import GcReport, SnapshotWriter
from zk.checkpoints import ZkCheckpointStore
from zk.manifests import ZkManifestStore
from zk.savepoints import ZkSavepointStore

__all__ = ["ChainCollector"]

#: a topology's savepoint pins, ``{owner: epochs}``, and the guard they hold under
_Pins = tuple[dict[str, set[int]], DropGuard]

logger = logging.getLogger(__name__)


class ChainCollector:
    """Drops what commits supersede from ZooKeeper and the ring.

    Args:
        manifests: The owners' published manifests.
        writer: Deletes unreferenced shards from the ring.
        savepoints: The savepoints pinning epochs.
        checkpoints: The commit records (retained ones pin their epochs).
    """

    def __init__(
        self,
        *,
        manifests: ZkManifestStore,
        writer: SnapshotWriter,
        savepoints: ZkSavepointStore,
        checkpoints: ZkCheckpointStore,
    ) -> None:
        self.manifests = manifests
        self.savepoints = savepoints
        self.checkpoints = checkpoints
        self._writer = writer

    def collect_committed(self, owners: Iterable[str], epoch: int) -> None:
        """Forget what committed ``epoch`` made unreachable for ``owners``.

        The manifests before ``epoch`` go (committed ones and those a rollback
        left behind; ``epoch``'s manifest lists its whole chain), except the
        epochs a savepoint pins. When ``epoch`` starts a new chain (a full
        snapshot), shards no remaining manifest references are deleted too,
        records and replicas. Failures are logged: what is kept is only garbage.
        """
        pins: dict[str, _Pins] = {}
        for owner in owners:
            try:
                keep, guard = self._pinned(owner, pins)
                epochs = self.manifests.epochs(owner)
                old = [e for e in epochs if e < epoch and e not in keep]
                if old:
                    self.manifests.drop(owner, old, [], guard=guard)
                if self.manifests.manifest(owner, epoch).base_epoch == epoch:
                    self._writer.collect_garbage(owner, epoch, keep=keep, guard=guard)
            except SR3Error as exc:
                logger.warning("old epochs of %s before %s kept: %s", owner, epoch, exc)

    def collect_garbage(self, owner: str, committed_epoch: int) -> GcReport:
        """Drop ``owner``'s epochs before the base of ``committed_epoch``'s chain.

        Shards no remaining manifest references are deleted from the ring. The
        epochs a savepoint pins stay, with every shard they list.

        Raises:
            CoordinationError: ZooKeeper failed, or no such epoch.
        """
        keep, guard = self._pinned(owner, {})
        return self._writer.collect_garbage(
            owner, committed_epoch, keep=keep, guard=guard
        )

    def _pinned(
        self, owner: str, pins: dict[str, _Pins]
    ) -> tuple[set[int], DropGuard | None]:
        """Return ``owner``'s epochs its topology's savepoints and retained commits pin.

        ``pins`` caches each topology's pins for one collection. A drop under
        the guard stops should a savepoint be taken meanwhile.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        topology = owner_topology(owner)
        if topology is None:
            return set(), None  # not a topology's state (sr3 snapshot put): no pins
        if topology not in pins:
            pinned, guard = self.savepoints.pins(topology)
            # commits kept restorable (sr3.checkpoint.retain) are kept alike;
            # the committer writes them before it collects, so no guard is needed
            for record in self.checkpoints.retained(topology):
                for held in record.owners:
                    pinned.setdefault(held, set()).add(record.epoch)
            pins[topology] = (pinned, guard)
        pinned, guard = pins[topology]
        return pinned.get(owner, set()), guard
