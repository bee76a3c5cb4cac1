"""Replicated shard writes and reads over the ring's storage nodes.

A write goes to the first r distinct nodes of the shard's preference list in parallel
and succeeds once ``write_quorum`` of them acknowledge; the nodes that acknowledged
become the shard's holders (repair brings it back to r later). A read tries live
holders in turn, verifies the checksum end to end, and rewrites a corrupt replica
from the good copy it found (read repair).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sr3.client import ClientPool
from sr3.config import RingConfig
from sr3.errors import (
    ChecksumError,
    QuorumError,
    ShardNotFoundError,
    StorageError,
)
from sr3.manifest import ShardMeta
from sr3.ports import Membership, NodeInfo
from sr3.ring import HashRing

__all__ = ["LiveMembers", "ReadOutcome", "ReplicatedStore", "report_corrupt"]

logger = logging.getLogger(__name__)

MembersFn = Callable[[], Mapping[str, NodeInfo]]


@dataclass
class ReadOutcome:
    """What a replicated read did: where the bytes came from and what it repaired."""

    shard_id: str
    served_by: str
    corrupt: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)


def report_corrupt(pool: ClientPool, node: NodeInfo, shard_id: str) -> bool:
    """Tell ``node`` its replica of ``shard_id`` served bad bytes; True if quarantined.

    The node re-reads the file; a replica that fails its crc32 is moved to
    quarantine and leaves the node's index, so the repair coordinator's next pass
    copies a good replica back (every reader calls this on a checksum failure).
    """
    try:
        with pool.client(node) as client:
            valid = client.verify(shard_id)
    except StorageError as exc:
        logger.warning(
            "could not report corrupt %s to %s: %s", shard_id, node.node_id, exc
        )
        return False
    if valid:
        logger.warning(
            "%s re-read %s intact: the corruption happened in transit",
            node.node_id,
            shard_id,
        )
    return not valid


class ReplicatedStore:
    """Writes shards to r nodes with a write quorum; reads with fallback and repair.

    Args:
        members: Returns the live ring nodes (membership view).
        pool: Client connections to ring nodes.
        ring_config: r, write quorum and vnodes.
        max_workers: Threads for parallel transfers (default 16).
    """

    def __init__(
        self,
        *,
        members: MembersFn,
        pool: ClientPool,
        ring_config: RingConfig,
        max_workers: int = 16,
    ) -> None:
        self._members = members
        self._pool = pool
        self._config = ring_config
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="sr3-io")
        self._ring_lock = threading.Lock()
        self._ring_key: frozenset[NodeInfo] = frozenset()
        self._ring: HashRing | None = None

    @property
    def pool(self) -> ClientPool:
        """The client pool this store uses."""
        return self._pool

    def close(self) -> None:
        """Stop the transfer threads."""
        self._executor.shutdown(wait=True)

    def ring(self) -> tuple[HashRing, dict[str, NodeInfo]]:
        """Return the hash ring over the live nodes, rebuilt only when they change.

        Raises:
            StorageError: no ring node is alive.
        """
        live = dict(self._members())
        if not live:
            msg = "no ring node is alive; start nodes with `sr3 lab up` or `sr3 node`"
            raise StorageError(msg)
        key = frozenset(live.values())
        with self._ring_lock:
            if self._ring is None or key != self._ring_key:
                self._ring = HashRing(live.values(), vnodes=self._config.vnodes)
                self._ring_key = key
            return self._ring, live

    def preference_list(self, shard_id: str) -> list[str]:
        """The nodes a shard's replicas go to over the live ring, first choice first.

        Raises:
            StorageError: no ring node is alive.
        """
        ring, _ = self.ring()
        return ring.preference_list(shard_id, self._config.replication_factor)

    def put(self, shard: ShardMeta, data: bytes) -> ShardMeta:
        """Write a shard to its preference list; return it with the acking holders.

        Raises:
            QuorumError: fewer than the write quorum acknowledged.
        """
        ring, live = self.ring()
        targets = ring.preference_list(shard.shard_id, self._config.replication_factor)
        needed = min(self._config.write_quorum, len(targets))
        futures = {
            node_id: self._executor.submit(self._put_one, live[node_id], shard, data)
            for node_id in targets
        }
        acked: list[str] = []
        errors: list[str] = []
        for node_id, fut in futures.items():
            try:
                fut.result()
                acked.append(node_id)
            except StorageError as exc:
                errors.append(f"{node_id}: {exc}")
                logger.warning(
                    "write of %s to %s failed: %s", shard.shard_id, node_id, exc
                )
        if len(acked) < needed:
            msg = (
                f"shard {shard.shard_id}: {len(acked)} of {len(targets)} replicas "
                f"acknowledged, write quorum is {needed} ({'; '.join(errors)}); "
                "check that enough ring nodes are up (`sr3 status`)"
            )
            raise QuorumError(msg)
        return shard.with_holders(acked)

    def _put_one(self, node: NodeInfo, shard: ShardMeta, data: bytes) -> None:
        with self._pool.client(node) as client:
            client.put(shard.shard_id, data, shard.crc32)

    def get(
        self, shard: ShardMeta, *, repair: bool = True
    ) -> tuple[bytes, ReadOutcome]:
        """Read a shard from the first live holder with a valid copy.

        Corrupt copies found on the way are rewritten from the good one when
        ``repair`` is set.

        Raises:
            ShardNotFoundError: no live holder served a valid copy.
        """
        _, live = self.ring()
        outcome = ReadOutcome(shard_id=shard.shard_id, served_by="")
        for node_id in self.read_order(shard, live):
            try:
                with self._pool.client(live[node_id]) as client:
                    data = client.get(shard.shard_id)
            except ChecksumError as exc:
                logger.warning(
                    "corrupt replica of %s on %s: %s", shard.shard_id, node_id, exc
                )
                outcome.corrupt.append(node_id)
                report_corrupt(self._pool, live[node_id], shard.shard_id)
                continue
            except StorageError as exc:
                logger.info(
                    "replica of %s on %s unavailable: %s", shard.shard_id, node_id, exc
                )
                outcome.unavailable.append(node_id)
                continue
            outcome.served_by = node_id
            if repair and outcome.corrupt:
                outcome.repaired = self._rewrite(shard, data, outcome.corrupt, live)
            return data, outcome
        msg = (
            f"no live holder served a valid copy of shard {shard.shard_id} "
            f"(holders {list(shard.holders)}, corrupt {outcome.corrupt}, "
            f"unavailable {outcome.unavailable}); restart the holders or restore "
            "from an older epoch"
        )
        raise ShardNotFoundError(msg)

    def get_key_group(self, shard: ShardMeta, key_group: int) -> bytes:
        """Read one key group's blob of a shard from the first live holder.

        Only the blob's bytes travel (``shard.span``), checked against the
        crc32 the span records. A holder whose bytes fail it is reported
        corrupt (the scrubber repairs it) and the next one is tried.

        Raises:
            ShardNotFoundError: no live holder served the blob, or the shard
                records no span for ``key_group`` (read it whole instead).
        """
        span = shard.span(key_group)
        if span is None:
            msg = (
                f"shard {shard.shard_id} records no span of key group {key_group}; "
                "read the shard whole"
            )
            raise ShardNotFoundError(msg)
        offset, length, crc = span
        _, live = self.ring()
        errors: list[str] = []
        for node_id in self.read_order(shard, live):
            try:
                with self._pool.client(live[node_id]) as client:
                    return client.get_range(shard.shard_id, offset, length, crc)
            except ChecksumError as exc:
                logger.warning(
                    "corrupt replica of %s on %s: %s", shard.shard_id, node_id, exc
                )
                report_corrupt(self._pool, live[node_id], shard.shard_id)
                errors.append(f"{node_id}: corrupt")
            except StorageError as exc:
                errors.append(f"{node_id}: {exc}")
        msg = (
            f"no live holder served key group {key_group} of shard "
            f"{shard.shard_id} (holders {list(shard.holders)}: "
            f"{'; '.join(errors) or 'none live'}); restart the holders"
        )
        raise ShardNotFoundError(msg)

    def read_order(self, shard: ShardMeta, live: Mapping[str, NodeInfo]) -> list[str]:
        """Return the live holders of ``shard`` in the order reads should try them."""
        return [h for h in shard.holders if h in live]

    def _rewrite(
        self,
        shard: ShardMeta,
        data: bytes,
        nodes: Sequence[str],
        live: Mapping[str, NodeInfo],
    ) -> list[str]:
        repaired: list[str] = []
        for node_id in nodes:
            try:
                self._put_one(live[node_id], shard, data)
            except StorageError as exc:
                logger.warning(
                    "read repair of %s on %s failed: %s", shard.shard_id, node_id, exc
                )
                continue
            logger.info("read repair rewrote %s on %s", shard.shard_id, node_id)
            repaired.append(node_id)
        return repaired


class LiveMembers:
    """A membership view kept current by a watch, so lookups cost no round trip.

    Args:
        membership: Source of membership changes.
    """

    def __init__(self, membership: Membership) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, NodeInfo] = {}
        membership.watch(self._update)

    def _update(self, members: Mapping[str, NodeInfo]) -> None:
        with self._lock:
            self._members = dict(members)

    def __call__(self) -> dict[str, NodeInfo]:
        """Return the live nodes by id."""
        with self._lock:
            return dict(self._members)
