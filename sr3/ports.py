"""Protocols through which the core reaches coordination, and the values they carry.

``zk/`` implements these against ZooKeeper; unit tests implement them in memory.
The core never sees kazoo: implementations translate its errors into
``sr3.errors.CoordinationError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sr3.manifest import Manifest, ShardMeta

__all__ = [
    "DropGuard",
    "Election",
    "ManifestStore",
    "Membership",
    "MembersCallback",
    "MembershipChange",
    "NodeInfo",
]

#: A precondition a drop checks atomically with each of its deletions: the
#: drop fails, deleting nothing more, once it no longer holds. ZooKeeper's is
#: a znode's path and the data version read when the kept epochs were chosen.
DropGuard = tuple[str, int]


@dataclass(frozen=True)
class NodeInfo:
    """A ring node as registered in membership.

    Attributes:
        node_id: Stable id, kept in the node's data dir so a restart keeps it.
        host: Address clients connect to.
        port: TCP port of the node's server.
        zone: Failure zone label; preference lists spread over zones first.
        capacity: Relative weight; scales the node's virtual nodes (default 1).
        incarnation: Which registration of ``node_id`` this is, set by the
            membership that read it, never by the node (it is no part of the
            record :meth:`to_dict` writes). Every registration gets a new one: a
            restarted process, and the same process registering again after its
            session expired (``ZkMembership``: the member znode's creation
            zxid), greater than every earlier one of the ring. None when the
            membership cannot tell (records built by hand, memberships without
            it). Left out of ``==`` and ``hash``: compare registrations with
            :meth:`same_registration`.
    """

    node_id: str
    host: str
    port: int
    zone: str | None = None
    capacity: int = 1
    incarnation: int | None = field(default=None, compare=False)

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def same_registration(self, other: NodeInfo) -> bool:
        """Return whether ``other`` is this very registration of this node.

        False when the ids differ, or when both incarnations are known and
        differ (the node left and registered again in between). With an
        incarnation unknown on either side, the same id is the same node.
        """
        if other.node_id != self.node_id:
            return False
        if self.incarnation is None or other.incarnation is None:
            return True
        return other.incarnation == self.incarnation

    def to_dict(self) -> dict[str, object]:
        """Return the registered record, a JSON/msgpack-friendly dict."""
        return {
            "node_id": self.node_id,
            "host": self.host,
            "port": self.port,
            "zone": self.zone,
            "capacity": self.capacity,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> NodeInfo:
        """Build from :meth:`to_dict` output."""
        zone = raw.get("zone")
        return cls(
            node_id=str(raw["node_id"]),
            host=str(raw["host"]),
            port=int(str(raw["port"])),
            zone=None if zone is None else str(zone),
            capacity=int(str(raw.get("capacity", 1))),
        )


MembersCallback = Callable[[Mapping[str, NodeInfo]], None]


@dataclass(frozen=True)
class MembershipChange:
    """Which registrations ended and began between two membership snapshots.

    A node that left and registered again between the two snapshots keeps its
    id but not its incarnation: it is in both :attr:`left` (the old
    registration) and :attr:`joined` (the new one). Comparing ids alone would
    miss that it ever left.

    Attributes:
        left: Registrations of ``before`` that ``after`` no longer has, by id.
        joined: Registrations of ``after`` that ``before`` did not have, by id.
    """

    left: tuple[NodeInfo, ...] = ()
    joined: tuple[NodeInfo, ...] = ()

    @classmethod
    def between(
        cls, before: Mapping[str, NodeInfo], after: Mapping[str, NodeInfo]
    ) -> MembershipChange:
        """Compare two ``{node id: NodeInfo}`` snapshots, registration by id."""
        left = tuple(
            info
            for node_id, info in sorted(before.items())
            if node_id not in after or not info.same_registration(after[node_id])
        )
        joined = tuple(
            info
            for node_id, info in sorted(after.items())
            if node_id not in before or not info.same_registration(before[node_id])
        )
        return cls(left=left, joined=joined)

    @property
    def rejoined(self) -> tuple[str, ...]:
        """Ids that left and registered again between the snapshots, sorted."""
        joined = {info.node_id for info in self.joined}
        return tuple(info.node_id for info in self.left if info.node_id in joined)

    def __bool__(self) -> bool:
        return bool(self.left or self.joined)


class Membership(Protocol):
    """Which ring nodes are alive, and changes to that set."""

    def register(self, info: NodeInfo) -> None:
        """Announce this node; the announcement ends with the session."""

    def unregister(self, node_id: str) -> None:
        """Withdraw a node's announcement (no error if already gone)."""

    def members(self) -> dict[str, NodeInfo]:
        """Return the live nodes by id (with their incarnation where known)."""

    def watch(self, callback: MembersCallback) -> None:
        """Call ``callback(members)`` now and after every membership change.

        Two calls may be the same ids while a node left and registered again
        in between (its incarnation differs): find departures with
        :meth:`MembershipChange.between`, not by comparing ids.
        """


class Election(Protocol):
    """Leader election among ring nodes; the leader coordinates repair."""

    def is_leader(self) -> bool:
        """Return whether this participant currently holds leadership."""


class ManifestStore(Protocol):
    """Durable owner -> epoch -> shards -> holders metadata.

    Shards are stored once per owner (a delta chain references older shards), and
    manifests list shard ids. ``publish`` is atomic: either the new shards, the
    manifest and the owner's latest-epoch pointer are all visible, or none is.
    """

    def owners(self) -> list[str]:
        """Return every owner with at least one published epoch, sorted."""

    def key_group_count(self, owner: str) -> int | None:
        """Return the G recorded on the owner's first epoch, or None if new."""

    def publish(self, manifest: Manifest, new_shards: Sequence[ShardMeta]) -> None:
        """Record ``new_shards`` and ``manifest`` atomically as the latest epoch.

        Raises:
            CoordinationError: the epoch exists already, it is not newer than the
                latest, or G differs from the owner's recorded G.
        """

    def latest(self, owner: str) -> Manifest | None:
        """Return the newest committed manifest, or None if the owner has none."""

    def manifest(self, owner: str, epoch: int) -> Manifest:
        """Return the manifest of ``epoch``.

        Raises:
            CoordinationError: no such epoch.
        """

    def epochs(self, owner: str) -> list[int]:
        """Return the owner's committed epochs, ascending."""

    def shards(self, owner: str) -> dict[str, ShardMeta]:
        """Return every shard the owner's manifests reference, with holders."""

    def update_holders(
        self,
        owner: str,
        shard_id: str,
        change: Callable[[tuple[str, ...]], Sequence[str]],
    ) -> ShardMeta:
        """Replace a shard's holders with ``change(current)`` (compare-and-set loop).

        Raises:
            CoordinationError: the shard is unknown.
        """

    def drop(
        self,
        owner: str,
        epochs: Sequence[int],
        shard_ids: Sequence[str],
        *,
        guard: DropGuard | None = None,
    ) -> None:
        """Delete old manifests and the shards no remaining manifest references.

        With ``guard``, each deletion happens only while the guard holds.
        """
