"""crc32: equal to zlib's for every buffer kind, with and without libdeflate."""

from __future__ import annotations

import os
import zlib

import pytest

from sr3 import checksum


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("size", [0, 1, 1000, 64 * 1024, 3 * 1024 * 1024 + 5])
def test_crc32_equals_zlib_for_every_buffer_kind(
    monkeypatch: pytest.MonkeyPatch, fast: bool, size: int
) -> None:
    if not fast:
        monkeypatch.setattr(checksum, "_fast_crc32", None)
    data = os.urandom(size)
    writable = bytearray(data)
    kinds: list[bytes | bytearray | memoryview] = [
        data,
        writable,
        memoryview(writable),
        memoryview(writable)[1:],  # a writable slice
        memoryview(data),  # read-only: zlib takes it
        memoryview(writable)[::2],  # strided: zlib refuses, as before
    ]
    for kind in kinds[:-1]:
        assert checksum.crc32(kind, 0x5EED) == zlib.crc32(kind, 0x5EED)
    if size > 1:
        with pytest.raises(BufferError):
            checksum.crc32(kinds[-1])
