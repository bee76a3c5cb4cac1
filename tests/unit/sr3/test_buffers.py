"""Receive buffers: writable, zero-filled, of the size asked, small or mapped."""

from __future__ import annotations

import pytest

from sr3.buffers import MAPPED_MIN_BYTES, fresh_buffer
from sr3.checksum import crc32


@pytest.mark.parametrize(
    "size", [0, 1, MAPPED_MIN_BYTES - 1, MAPPED_MIN_BYTES, 5 << 20]
)
def test_a_fresh_buffer_is_writable_zeroed_and_exactly_its_size(size: int) -> None:
    view = fresh_buffer(size)
    assert view.nbytes == size and view.format == "B" and not view.readonly
    assert view.tobytes() == bytes(size)
    if size:
        view[size - 1 :] = b"\x7f"
        assert view[size - 1] == 0x7F
        # what R does with a shard: checksum views of it, keep slices of it
        assert crc32(view) == crc32(bytes(view))
        tail = view[size // 2 :]
        del view
        assert tail[-1] == 0x7F


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        fresh_buffer(-1)
