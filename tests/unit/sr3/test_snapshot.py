"""The receive buffers SnapshotReader.stream lends and takes back."""

import pytest

from sr3.snapshot_reader import _Buffers, _StreamClosedError


def test_a_released_buffer_is_reused_and_its_old_view_refuses_use() -> None:
    buffers = _Buffers(1, 100)
    view = buffers.take(40)
    assert (view.nbytes, view.readonly) == (40, False)
    first = view.obj
    buffers.give_back(view)
    with pytest.raises(ValueError, match="released"):
        view[0]
    again = buffers.take(60)
    assert again.obj is first


def test_a_buffer_the_caller_still_views_is_never_reused() -> None:
    buffers = _Buffers(1, 100)
    view = buffers.take(10)
    view[:] = b"k" * 10
    kept = view[2:5]  # the consumer kept a piece of the payload
    buffers.give_back(view)
    fresh = buffers.take(10)
    fresh[:] = b"x" * 10
    assert fresh.obj is not kept.obj
    assert bytes(kept) == b"kkk"


def test_a_larger_payload_gets_a_larger_buffer() -> None:
    buffers = _Buffers(1, 8)
    buffers.give_back(buffers.take(8))
    assert buffers.take(1000).nbytes == 1000


def test_close_stops_a_pump_waiting_for_a_buffer() -> None:
    buffers = _Buffers(1, 8)
    buffers.take(8)  # the only buffer is lent
    buffers.close()
    with pytest.raises(_StreamClosedError):
        buffers.take(8)
    with pytest.raises(_StreamClosedError):
        buffers.take(8)
