"""Consistent-hash ring: mmh3 virtual nodes, bisect lookup, zone-aware preference lists.

The only module that imports ``mmh3``. Both hash seeds are part of the storage format:
changing either moves every shard and every key group, so they are fixed forever and
pinned by golden vectors in ``tests/unit/sr3/test_ring.py``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import mmh3

from sr3.config import RingConfig
from sr3.errors import RingError
from sr3.ports import NodeInfo

__all__ = [
    "KEY_GROUP_SEED",
    "MAX_CAPACITY",
    "RING_SEED",
    "HashRing",
    "key_group_hash",
    "ring_hash",
]

#: Seed of ring positions (vnodes and shard ids): ASCII ``"SR3R"``. Never change it.
RING_SEED = 0x53523352
#: Seed of key-group hashing (encoded keys): ASCII ``"SR3K"``. Never change it.
KEY_GROUP_SEED = 0x5352334B

_DEFAULT_VNODES = RingConfig.vnodes
#: Largest node capacity: each unit is ``vnodes`` (2048) ring points that every
#: client and node hashes and sorts on each membership change; 100 units take a
#: client about 0.3 s to place, a million would take the whole ring down.
MAX_CAPACITY = 100


def ring_hash(key: str | bytes) -> int:
    """Return the unsigned 32-bit ring position of a shard id or vnode label."""
    return int(mmh3.hash(key, RING_SEED, signed=False))


def key_group_hash(data: bytes) -> int:
    """Return the unsigned 32-bit murmur3 of an encoded key (``codec.encode_key``)."""
    return int(mmh3.hash(data, KEY_GROUP_SEED, signed=False))


def _zone_of(info: NodeInfo) -> str:
    # An unlabelled node shares a failure zone with nobody, so a ring without labels
    # degenerates to plain distinct-node placement.
    return f"zone:{info.zone}" if info.zone is not None else f"node:{info.node_id}"


class HashRing:
    """An immutable consistent-hash ring of physical nodes.

    Node ``n`` owns ``vnodes * n.capacity`` virtual nodes at positions
    ``mmh3.hash(f"{node_id}#{i}", RING_SEED, signed=False)``. A key's position is
    :func:`ring_hash` of the key; its owner is the first virtual node at or after it
    clockwise, wrapping around. Equal positions are ordered by node id, so every
    process builds the same ring from the same members.

    ``with_node`` and ``without_node`` return new rings; a ring is safe to share
    between threads.

    Args:
        nodes: The ring's members; node ids must be unique.
        vnodes: Virtual nodes per unit of capacity (default ``RingConfig.vnodes``).

    Raises:
        RingError: duplicate node ids, ``vnodes < 1`` or a capacity outside
            1..:data:`MAX_CAPACITY` (membership clamps what it reads).
    """

    __slots__ = ("_nodes", "_owners", "_positions", "_vnodes", "_zone_count", "_zones")

    def __init__(
        self, nodes: Iterable[NodeInfo] = (), *, vnodes: int = _DEFAULT_VNODES
    ) -> None:
        if vnodes < 1:
            msg = f"vnodes={vnodes} is invalid; use at least 1 (sr3.ring.vnodes)"
            raise RingError(msg)
        members: dict[str, NodeInfo] = {}
        for info in nodes:
            if info.node_id in members:
                msg = f"node {info.node_id!r} appears twice; node ids must be unique"
                raise RingError(msg)
            if not 1 <= info.capacity <= MAX_CAPACITY:
                msg = (
                    f"node {info.node_id!r} has capacity {info.capacity}; "
                    f"use a capacity of 1..{MAX_CAPACITY}"
                )
                raise RingError(msg)
            members[info.node_id] = info
        points = sorted(
            (ring_hash(f"{node_id}#{i}"), node_id)
            for node_id, info in members.items()
            for i in range(vnodes * info.capacity)
        )
        self._vnodes = vnodes
        self._nodes = members
        self._positions = [position for position, _ in points]
        self._owners = [node_id for _, node_id in points]
        self._zones = {node_id: _zone_of(info) for node_id, info in members.items()}
        self._zone_count = len(set(self._zones.values()))

    @property
    def vnodes(self) -> int:
        """Virtual nodes per unit of capacity."""
        return self._vnodes

    @property
    def nodes(self) -> Mapping[str, NodeInfo]:
        """The members by node id (read-only)."""
        return MappingProxyType(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __repr__(self) -> str:
        return f"HashRing(nodes={sorted(self._nodes)!r}, vnodes={self._vnodes})"

    def with_node(self, info: NodeInfo) -> HashRing:
        """Return a ring with ``info`` added, or replacing the node of the same id."""
        members = dict(self._nodes)
        members[info.node_id] = info
        return HashRing(members.values(), vnodes=self._vnodes)

    def without_node(self, node_id: str) -> HashRing:
        """Return a ring without ``node_id``.

        Raises:
            RingError: the node is not a member.
        """
        if node_id not in self._nodes:
            msg = (
                f"node {node_id!r} is not on the ring (members: {sorted(self._nodes)})"
            )
            raise RingError(msg)
        members = [info for nid, info in self._nodes.items() if nid != node_id]
        return HashRing(members, vnodes=self._vnodes)

    def _start(self, key: str | bytes) -> int:
        if not self._positions:
            msg = (
                f"cannot place {key!r}: the ring has no nodes; "
                "start ring nodes (sr3 node) or check ZooKeeper membership"
            )
            raise RingError(msg)
        index = bisect_left(self._positions, ring_hash(key))
        return 0 if index == len(self._positions) else index

    def primary(self, key: str | bytes) -> str:
        """Return the node owning ``key``: the first virtual node clockwise.

        Raises:
            RingError: the ring is empty.
        """
        return self._owners[self._start(key)]

    def preference_list(self, key: str | bytes, r: int) -> list[str]:
        """Return the first ``r`` distinct nodes clockwise from ``key``, zones first.

        When nodes carry zone labels, the list first takes the next node of each zone
        not yet used, then fills with the remaining nodes in clockwise order. Fewer
        than ``r`` nodes on the ring yields every node: callers check the length.

        Raises:
            RingError: the ring is empty or ``r < 1``.
        """
        if r < 1:
            msg = f"preference list length r={r} is invalid; use at least 1"
            raise RingError(msg)
        index = self._start(key)
        want_nodes = min(r, len(self._nodes))
        want_zones = min(r, self._zone_count)
        owners, zones, total = self._owners, self._zones, len(self._owners)
        walked: list[str] = []
        seen: set[str] = set()
        zones_seen: set[str] = set()
        zone_first: list[str] = []
        for step in range(total):
            node_id = owners[(index + step) % total]
            if node_id in seen:
                continue
            seen.add(node_id)
            walked.append(node_id)
            zone = zones[node_id]
            if zone not in zones_seen:
                zones_seen.add(zone)
                zone_first.append(node_id)
            if len(walked) >= want_nodes and len(zones_seen) >= want_zones:
                break
        if len(zone_first) >= want_nodes:
            return zone_first[:want_nodes]
        chosen = set(zone_first)
        rest = [node_id for node_id in walked if node_id not in chosen]
        return zone_first + rest[: want_nodes - len(zone_first)]
