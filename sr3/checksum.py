"""The crc32 every replica, manifest and transfer records: zlib's, made faster.

:func:`crc32` equals ``zlib.crc32``; large buffers go through libdeflate when the
system has it (checked against zlib before use).
"""

from __future__ import annotations

import ctypes
import logging
import zlib
from collections.abc import Callable
from typing import Final

__all__ = ["crc32"]

logger = logging.getLogger(__name__)

_LIBDEFLATE: Final = "libdeflate.so.0"
#: Below this, the ctypes call costs more than it saves.
_FAST_CRC_MIN_BYTES: Final = 64 * 1024
_CrcFn = Callable[[int, bytes | int, int], int]


def _load_fast_crc32() -> _CrcFn | None:
    """Return libdeflate's crc32 (folding with carry-less multiplies), or None.

    It computes exactly ``zlib.crc32`` several times faster and releases the GIL
    as ``zlib.crc32`` does. Checked against ``zlib.crc32`` before use.
    """
    try:
        fn = ctypes.CDLL(_LIBDEFLATE).libdeflate_crc32
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_uint32
    probe = bytes(range(256)) * 1031
    if fn(0, probe, len(probe)) != zlib.crc32(probe) or fn(
        0x1234ABCD, probe, 77
    ) != zlib.crc32(probe[:77], 0x1234ABCD):
        logger.warning("%s computes another crc32 than zlib; not used", _LIBDEFLATE)
        return None
    checked: _CrcFn = fn
    return checked


_fast_crc32 = _load_fast_crc32()


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return ``zlib.crc32(data, value)``, the checksum replicas and manifests record.

    Large ``bytes`` and writable contiguous buffers go through libdeflate when
    the system has it (the read path checks every payload it receives; zlib's
    crc32 was its largest cost).
    """
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if _fast_crc32 is None or size < _FAST_CRC_MIN_BYTES:
        return zlib.crc32(data, value)
    if type(data) is bytes:
        return _fast_crc32(value, data, size)
    try:
        # the buffer's first byte, for its address: read-only or strided buffers
        # refuse (zlib takes them). Not ``(c_char * size).from_buffer``: ctypes
        # creates and caches an array type per size, 30 us each, for ever, and
        # a socket reader sees thousands of sizes.
        first = ctypes.c_char.from_buffer(data)
    except (TypeError, ValueError):
        return zlib.crc32(data, value)
    # ``first`` holds the buffer exported until the call returns
    return _fast_crc32(value, ctypes.addressof(first), size)
