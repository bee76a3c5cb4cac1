"""Buffers a recovering process receives shards into and keeps.

``bytearray(n)`` zero-fills its ``n`` bytes in user space, after the kernel has
already zero-filled every page on first touch, and just before the socket copy
overwrites them all: one pass over the memory too many. A private anonymous
mapping is zero-filled by the kernel alone, page by page, as the receive first
touches it.
"""

from __future__ import annotations

import mmap

__all__ = ["MAPPED_MIN_BYTES", "fresh_buffer"]

#: Smaller buffers come from ``bytearray``: a mapping costs two system calls.
MAPPED_MIN_BYTES = 256 * 1024


def fresh_buffer(size: int) -> memoryview:
    """Return a writable, zero-filled buffer of ``size`` bytes (format ``B``).

    Buffers of :data:`MAPPED_MIN_BYTES` and more are private anonymous mappings,
    unmapped when the last view of them goes away.

    Raises:
        ValueError: ``size`` is negative.
        OSError: the system refused the mapping (out of memory or map count).
    """
    if size < 0:
        msg = f"buffer size {size} is negative"
        raise ValueError(msg)
    if size < MAPPED_MIN_BYTES:
        return memoryview(bytearray(size))
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return memoryview(mapping)
