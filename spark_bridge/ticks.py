"""Tick tuples for stateful bolts: one tick group per Spark partition and batch.

Storm ticks a bolt every ``topology.tick.tuple.freq.secs``. A stateful bolt on
Spark runs once per key inside ``applyInPandasWithState`` (or
``transformWithStateInPandas``), so its task instances live in every Spark
partition its keys hash to, and die with the Spark task. To tick each of them
after its last key, the keying stage (:class:`spark_bridge.keying.KeyStage`)
adds one ``tick`` row per Spark partition under a tick key: ``0xff`` and a
salt chosen so that Spark's hash partitioning (Murmur3 of the key, seed 42,
``pmod`` the shuffle partitions) sends it to that partition. Spark runs a
partition's groups in key order and no real key (a msgpack array) or
pass-through key (``0x00``) sorts after ``0xff``, so the tick group runs last,
and the stateful stage ticks every task instance it hosted there.
"""

from __future__ import annotations

import functools
import struct
from typing import Final

from pyspark import TaskContext

__all__ = [
    "SHUFFLE_PARTITIONS_KEY",
    "is_tick_key",
    "shuffle_partitions",
    "spark_partition",
    "tick_keys",
]

#: Spark conf key of the stateful operators' partition count.
SHUFFLE_PARTITIONS_KEY: Final = "spark.sql.shuffle.partitions"
_TICK_PREFIX: Final = b"\xff"
#: Murmur3 seed of Spark's ``hash``/``HashPartitioning``.
_SPARK_SEED: Final = 42
_MASK32: Final = 0xFFFFFFFF


def is_tick_key(gkey: bytes) -> bool:
    """Return whether ``gkey`` is a tick key (never a msgpack-encoded state key)."""
    return gkey[:1] == _TICK_PREFIX


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK32
    k1 = ((k1 << 15) | (k1 >> 17)) & _MASK32
    return (k1 * 0x1B873593) & _MASK32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _MASK32
    return (h1 * 5 + 0xE6546B64) & _MASK32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    return h1 ^ (h1 >> 16)


def spark_partition(data: bytes, partitions: int) -> int:
    """Return the partition Spark's hash partitioning gives a binary key.

    Spark's ``Murmur3_x86_32.hashUnsafeBytes`` with seed 42: little-endian
    4-byte words, then each trailing byte (sign-extended) as a word of its own;
    the partition is the hash ``pmod`` ``partitions``.
    """
    h1 = _SPARK_SEED
    aligned = len(data) - len(data) % 4
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        signed = byte - 256 if byte >= 128 else byte  # noqa: PLR2004 (a byte)
        h1 = _mix_h1(h1, _mix_k1(signed & _MASK32))
    hashed = _fmix(h1, len(data))
    if hashed & 0x80000000:
        hashed -= 1 << 32
    return hashed % partitions  # Python's % is pmod here


@functools.cache
def tick_keys(partitions: int) -> tuple[bytes, ...]:
    """Return one tick key per Spark partition, key ``p`` hashing to ``p``."""
    found: dict[int, bytes] = {}
    salt = 0
    while len(found) < partitions:
        key = _TICK_PREFIX + salt.to_bytes(4, "big")
        found.setdefault(spark_partition(key, partitions), key)
        salt += 1
    return tuple(found[p] for p in range(partitions))


def shuffle_partitions(default: int) -> int:
    """Return the running query's shuffle partitions (``default`` if unknown).

    Spark passes the query's SQL conf (the checkpoint's partition count
    included) to its tasks as local properties.
    """
    context = TaskContext.get()
    value = (
        None if context is None else context.getLocalProperty(SHUFFLE_PARTITIONS_KEY)
    )
    return int(value) if value else default
