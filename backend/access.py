"""The state backend's handles on ZooKeeper and the ring, for one process.

A Storm stateful task, a Spark driver or executor, and the CLI open a
:class:`RingAccess` from a conf mapping (``sr3.zk.hosts``, ``sr3.zk.chroot``; the
ring secret comes from ``sr3.node.secret`` or the ``SR3_NODE_SECRET``
environment variable) to read the committed epoch of a topology, restore an
owner's key groups through star, line or tree recovery, and write snapshots.
Reading a component's committed state back (:mod:`backend.committed`) and
collecting what a commit supersedes (:mod:`backend.collector`) are done by the
helpers it holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from backend.collector import ChainCollector
from backend.committed import CommittedReader, CommittedState
from backend.restorer import StateRestorer
from sr3.client import ClientPool
from sr3.config import Sr3Config
from sr3.manifest import Manifest
from sr3.replication import LiveMembers, ReplicatedStore
from sr3.snapshot import GcReport, SnapshotReader, SnapshotWriter, WriteReport
from zk.checkpoints import CommitRecord, ZkCheckpointStore
from zk.client import ZkSession, connect
from zk.manifests import ZkManifestStore
from zk.membership import ZkMembership
from zk.savepoints import ZkSavepointStore

__all__ = [
    "CommitRecord",
    "RingAccess",
    "config_from_conf",
]


def config_from_conf(conf: Mapping[str, Any]) -> Sr3Config:
    """Return the sr3 configuration in a Storm conf (``sr3.*`` keys).

    Keys of other subsystems (``sr3.checkpoint.interval.s``) are ignored here.
    The ring secret falls back to ``SR3_NODE_SECRET``.

    Raises:
        ConfigError: a known key has an invalid value.
    """
    config = Sr3Config.from_mapping(conf, strict=False)
    if not config.node.secret and os.environ.get("SR3_NODE_SECRET"):
        node = replace(config.node, secret=os.environ["SR3_NODE_SECRET"])
        config = replace(config, node=node)
    return config


class RingAccess:
    """Open handles on ZooKeeper and the ring for one process.

    Args:
        config: Where ZooKeeper is and how to reach the ring nodes.
        create: Create a missing chroot (writers); readers pass False, so a
            mistyped chroot is an error instead of a new empty cluster.
    """

    def __init__(self, config: Sr3Config, *, create: bool = True) -> None:
        self.config = config
        self.session: ZkSession = connect(config.zk, create=create)
        self.pool = ClientPool(config.node)
        self.membership = ZkMembership(self.session)
        self.members = LiveMembers(self.membership)
        self.store = ReplicatedStore(
            members=self.members, pool=self.pool, ring_config=config.ring
        )
        self.manifests = ZkManifestStore(self.session)
        self.checkpoints = ZkCheckpointStore(self.session)
        self.savepoints = ZkSavepointStore(self.session)
        self._writer = SnapshotWriter(
            store=self.store,
            manifests=self.manifests,
            max_shard_bytes=config.ring.max_shard_bytes,
        )
        self._reader = SnapshotReader(store=self.store, manifests=self.manifests)
        self.restorer = StateRestorer(
            config,
            store=self.store,
            manifests=self.manifests,
            members=self.members,
            pool=self.pool,
            reader=self._reader,
        )
        self._committed = CommittedReader(
            self.checkpoints, self._reader, config.zk.chroot
        )
        self._collector = ChainCollector(
            manifests=self.manifests,
            writer=self._writer,
            savepoints=self.savepoints,
            checkpoints=self.checkpoints,
        )

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> RingAccess | None:
        """Open from a Storm conf; None when ``sr3.zk.hosts`` is not set.

        Raises:
            ConfigError: a ``sr3.*`` value is invalid.
            CoordinationError: ZooKeeper is unreachable.
        """
        config = config_from_conf(conf)
        if not config.zk.hosts:
            return None
        return cls(config)

    def close(self) -> None:
        """Close the ring connections and the ZooKeeper session."""
        self.store.close()
        self.pool.close_all()
        self.membership.close()
        self.session.close()

    def committed(self, topology: str) -> CommitRecord | None:
        """Return the topology's last globally committed epoch.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        return self.checkpoints.committed(topology)

    def committed_state(
        self, topology: str, component: str
    ) -> tuple[int, CommittedState]:
        """Return the committed epoch and state of a component, ``{key: fields}``.

        See :meth:`backend.committed.CommittedReader.committed_state`.
        """
        return self._committed.committed_state(topology, component)

    def state_summary(
        self, topology: str, components: Iterable[str]
    ) -> dict[str, dict[str, Any]]:
        """Return ``{component: {"epoch", "keys"}}`` of the committed state.

        See :meth:`backend.committed.CommittedReader.state_summary`.
        """
        return self._committed.state_summary(topology, components)

    def committed_dump(
        self, topology: str, component: str
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Return the committed epoch and state as ``sr3 state dump`` prints it.

        See :meth:`backend.committed.CommittedReader.committed_dump`.
        """
        return self._committed.committed_dump(topology, component)

    def write(
        self,
        *,
        owner: str,
        epoch: int,
        key_group_count: int,
        key_groups: Iterable[tuple[int, bytes]],
        kind: str,
        offsets: Mapping[str, Any],
        base: Manifest | None = None,
    ) -> WriteReport:
        """Write one epoch of ``owner`` through the ring and publish its manifest.

        A delta appends to ``base`` (default: the latest published manifest).

        Raises:
            QuorumError: a shard missed its write quorum.
            CoordinationError: the manifest could not be published.
        """
        return self._writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=key_group_count,
            key_groups=key_groups,
            kind=kind,
            offsets=offsets,
            base=base,
        )

    def collect_committed(self, owners: Iterable[str], epoch: int) -> None:
        """Forget what committed ``epoch`` made unreachable for ``owners``.

        See :meth:`backend.collector.ChainCollector.collect_committed`.
        """
        self._collector.collect_committed(owners, epoch)

    def collect_garbage(self, owner: str, committed_epoch: int) -> GcReport:
        """Drop ``owner``'s epochs before the base of ``committed_epoch``'s chain.

        See :meth:`backend.collector.ChainCollector.collect_garbage`.
        """
        return self._collector.collect_garbage(owner, committed_epoch)
