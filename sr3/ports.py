"""Protocols through which the core reaches coordination, and the values they carry.

``zk/`` implements these against ZooKeeper; unit tests implement them in memory.
The core never sees kazoo: implementations translate its errors into
``sr3.errors.CoordinationError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sr3.manifest import Manifest, ShardMeta

__all__ = [
    "Election",
    "ManifestStore",
    "Membership",
    "MembersCallback",
    "NodeInfo",
]


@dataclass(frozen=True)
class NodeInfo:
    """A ring node as registered in membership.

    Attributes:
        node_id: Stable id, kept in the node's data dir so a restart keeps it.
        host: Address clients connect to.
        port: TCP port of the node's server.
        zone: Failure zone label; preference lists spread over zones first.
        capacity: Relative weight; scales the node's virtual nodes (default 1).
    """

    node_id: str
    host: str
    port: int
    zone: str | None = None
    capacity: int = 1

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def to_dict(self) -> dict[str, object]:
        """Return a JSON/msgpack-friendly dict."""
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


class Membership(Protocol):
    """Which ring nodes are alive, and changes to that set."""

    def register(self, info: NodeInfo) -> None:
        """Announce this node; the announcement ends with the session."""

    def unregister(self, node_id: str) -> None:
        """Withdraw a node's announcement (no error if already gone)."""

    def members(self) -> dict[str, NodeInfo]:
        """Return the live nodes by id."""

    def watch(self, callback: MembersCallback) -> None:
        """Call ``callback(members)`` now and after every membership change."""


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

    def drop(self, owner: str, epochs: Sequence[int], shard_ids: Sequence[str]) -> None:
        """Delete old manifests and the shards no remaining manifest references."""
