"""Storm's acker and its tuple-tree bookkeeping, run in process.

Every spout tuple with a message id gets a random 64-bit root id. Every edge of
its tuple tree (a tuple sent to a task) gets a random 64-bit id; the acker keeps,
per root, the XOR of the ids it has been told about: the spout XORs in the ids of
the tuples it sent (``init``), a bolt acking an input XORs in that input's id and
the ids of the tuples it anchored on it (``ack``). Each id enters twice, so the
value is zero exactly when the whole tree is acked. A ``fail`` marks the root
failed. Expiry is Storm's ``RotatingMap``: entries live between one and
``buckets - 1`` rotations (the spout rotates 2 buckets every message timeout,
the acker 3).
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

__all__ = [
    "AckOutcome",
    "Acker",
    "Anchors",
    "PendingInput",
    "RotatingMap",
    "TreeResult",
    "new_edge_id",
    "xor_anchors",
]

K = TypeVar("K")
V = TypeVar("V")
_MASK64: Final = (1 << 64) - 1
#: Root id -> XOR of edge ids, the ``MessageId.anchorsToIds`` of a tuple.
Anchors = dict[int, int]


def new_edge_id(rng: random.Random) -> int:
    """Return a random non-zero 64-bit id (zero would vanish from an XOR)."""
    while True:
        value = rng.getrandbits(64)
        if value:
            return value


class RotatingMap(Generic[K, V]):
    """Storm's ``RotatingMap``: ``put`` fills the newest bucket, ``rotate`` drops.

    A value lives between ``buckets - 1`` and ``buckets`` rotations unless renewed.
    """

    def __init__(self, buckets: int) -> None:
        if buckets < 2:
            msg = f"a RotatingMap needs at least 2 buckets, not {buckets}"
            raise ValueError(msg)
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(buckets))

    def rotate(self) -> dict[K, V]:
        """Drop and return the oldest bucket."""
        expired = self._buckets.pop()
        self._buckets.appendleft({})
        return expired

    def get(self, key: K) -> V | None:
        """Return the value of ``key``, or None."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket[key]
        return None

    def put(self, key: K, value: V) -> None:
        """Store ``key`` in the newest bucket (renewing its lifetime)."""
        self._buckets[0][key] = value
        for bucket in list(self._buckets)[1:]:
            bucket.pop(key, None)

    def remove(self, key: K) -> V | None:
        """Remove and return the value of ``key``, or None."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def clear(self) -> None:
        """Forget every entry."""
        for bucket in self._buckets:
            bucket.clear()

    def keys(self) -> list[K]:
        """Return every key, newest bucket first."""
        return [k for bucket in self._buckets for k in bucket]

    def values(self) -> list[V]:
        """Return every value, newest bucket first."""
        return [v for bucket in self._buckets for v in bucket.values()]

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets)


class TreeResult(enum.Enum):
    """How a tuple tree ended."""

    ACKED = "ack"
    FAILED = "fail"


@dataclass(frozen=True)
class AckOutcome:
    """A finished tuple tree: tell ``spout_task`` to ack or fail ``root``."""

    root: int
    spout_task: int
    result: TreeResult


@dataclass
class _AckEntry:
    value: int = 0
    spout_task: int = -1
    failed: bool = False


class Acker:
    """Tracks tuple trees by root id, as Storm's ``Acker`` bolt does."""

    BUCKETS: Final = 3

    def __init__(self) -> None:
        self._pending: RotatingMap[int, _AckEntry] = RotatingMap(self.BUCKETS)

    def __len__(self) -> int:
        return len(self._pending)

    def _entry(self, root: int) -> _AckEntry:
        entry = self._pending.get(root)
        if entry is None:
            entry = _AckEntry()
            self._pending.put(root, entry)
        return entry

    def _settle(self, root: int, entry: _AckEntry) -> AckOutcome | None:
        if entry.spout_task < 0 or not (entry.value == 0 or entry.failed):
            return None
        self._pending.remove(root)
        result = TreeResult.FAILED if entry.failed else TreeResult.ACKED
        return AckOutcome(root, entry.spout_task, result)

    def init(self, root: int, value: int, spout_task: int) -> AckOutcome | None:
        """Register a spout tuple: ``value`` is the XOR of the ids it sent."""
        entry = self._entry(root)
        entry.value ^= value
        entry.spout_task = spout_task
        return self._settle(root, entry)

    def ack(self, root: int, value: int) -> AckOutcome | None:
        """XOR a bolt's ack of a tuple of the tree into its root."""
        entry = self._entry(root)
        entry.value ^= value
        return self._settle(root, entry)

    def fail(self, root: int) -> AckOutcome | None:
        """Mark a tree failed (explicit fail, lost tuple)."""
        entry = self._entry(root)
        entry.failed = True
        return self._settle(root, entry)

    def rotate(self) -> int:
        """Drop the oldest bucket silently (spouts time tuples out); return its size."""
        return len(self._pending.rotate())


@dataclass
class PendingInput:
    """A tuple handed to a bolt subprocess and not yet acked or failed.

    Attributes:
        anchors: Root id -> edge XOR of this tuple (empty when unanchored).
        source: Component that emitted it.
        stream: Stream it came on.
        values: Its values (kept for error reports).
        ack_value: XOR of the edge ids of tuples anchored on it.
        generation: Native-mode rollback generation of its tree (None: unknown),
            passed on to the tuples anchored on it.
        sample: The id of the tree, sampled for its complete latency alone,
            that it belongs to (None: none); passed on like ``generation``.
    """

    anchors: Anchors
    source: str
    stream: str
    values: list[object]
    ack_value: int = 0
    generation: int | None = None
    sample: int | None = None
    roots: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.roots = tuple(self.anchors)


def xor_anchors(parents: Iterable[PendingInput], rng: random.Random) -> Anchors:
    """Return the anchors of a new tuple anchored on ``parents`` (one target task).

    As in ``BoltOutputCollectorImpl.boltEmit``: one fresh edge id per parent that
    belongs to a tree, XORed into that parent's ack value and into each of its roots.
    """
    anchors: Anchors = {}
    for parent in parents:
        if not parent.anchors:
            continue
        edge = new_edge_id(rng)
        parent.ack_value ^= edge
        for root in parent.anchors:
            anchors[root] = anchors.get(root, 0) ^ edge
    return anchors
