"""Shards a key-group-routed task read in a live hand-over, kept for the next batches.

A rebalance moves a sender's key groups to a receiver in batches, one an epoch;
the batches of one sender usually sit in the same shards of its chain (a shard
holds a run of key groups), and a shard never changes once written. The
receiver keeps what it read (up to a byte budget, least recently used out), so
the next batch reads only the shards it has not seen: the deltas written since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

__all__ = ["DEFAULT_BUDGET_BYTES", "ShardCache"]

Blob = bytes | memoryview

#: Bytes of shard payload a task keeps between the batches of a rebalance.
DEFAULT_BUDGET_BYTES: Final = 64 * 1024 * 1024


class ShardCache:
    """Decoded shards by id, least recently used out past ``budget_bytes``.

    Thread-safe: a receiver's pre-fetch fills it on a background thread.

    Args:
        budget_bytes: Payload bytes kept at most.
    """

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._budget = budget_bytes
        self._shards: OrderedDict[str, tuple[int, dict[int, Blob]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, shard_id: str) -> dict[int, Blob] | None:
        """Return a shard's key groups, or None when it is not kept."""
        with self._lock:
            entry = self._shards.get(shard_id)
            if entry is None:
                return None
            self._shards.move_to_end(shard_id)
            return entry[1]

    def put(self, shard_id: str, size: int, key_groups: dict[int, Blob]) -> None:
        """Keep a shard read (a shard larger than the budget is not kept)."""
        with self._lock:
            if size > self._budget or shard_id in self._shards:
                return
            self._shards[shard_id] = (size, key_groups)
            self._bytes += size
            while self._bytes > self._budget:
                _sid, (gone, _kgs) = self._shards.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        """Forget every shard (the rebalance is over)."""
        with self._lock:
            self._shards.clear()
            self._bytes = 0
