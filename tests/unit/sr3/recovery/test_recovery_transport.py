"""Relay frames: heads decoded alone, blobs received in place, forwarded as is."""

from __future__ import annotations

from typing import Any

import pytest

from sr3 import wire
from sr3.config import NodeConfig
from sr3.errors import NodeUnavailableError, ShardNotFoundError
from sr3.recovery.transport import RelayStream, split_head
from sr3.recovery.upstream import recv_raw


class FakeSocket:
    """What the readers use of a blocking socket, over fixed bytes."""

    def __init__(self, data: bytes, *, step: int = 7) -> None:
        self._data = memoryview(data)
        self._at = 0
        self._step = step  # short reads, as a non-blocking socket gives

    def recv_into(self, view: memoryview, nbytes: int = 0, flags: int = 0) -> int:
        n = min(len(view), self._step, len(self._data) - self._at)
        view[:n] = self._data[self._at : self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        pass

    @property
    def left(self) -> int:
        return len(self._data) - self._at


def frame(fields: dict[str, Any], blob: bytes | None = None) -> bytes:
    parts = wire.pack_frame({"v": 1, "ok": True, **fields}, blob=blob)
    return b"".join(bytes(p) for p in parts)


def stream_over(data: bytes, *, step: int = 7) -> tuple[RelayStream, FakeSocket]:
    stream = RelayStream("127.0.0.1", 1, {"op": "x"}, config=NodeConfig())
    sock = FakeSocket(data, step=step)
    stream._sock = sock  # type: ignore[assignment]  # a fake socket
    return stream, sock


def test_split_head_decodes_the_fields_and_finds_the_blob() -> None:
    blob = bytes(range(256)) * 40
    data = frame({"t": "shard", "shard": "o@1#3", "off": 0, "end": True}, blob)
    body = data[4:]
    got = split_head(body[:512], len(body))
    assert got is not None
    fields, start = got
    assert fields == {
        "v": 1,
        "ok": True,
        "t": "shard",
        "shard": "o@1#3",
        "off": 0,
        "end": True,
    }
    assert body[start:] == blob


def test_split_head_refuses_frames_without_a_trailing_blob() -> None:
    small = frame({"t": "lost", "node": "n1", "error": "data\xc6 gone"})[4:]
    assert split_head(small, len(small)) is None
    # a blob that does not run to the end of the frame is not a trailing blob
    body = frame({"t": "piece"}, b"abc")[4:]
    assert split_head(body, len(body) + 1) is None


@pytest.mark.parametrize("step", [1, 5, 4096])
def test_a_raw_frame_is_the_bytes_that_arrived(step: int) -> None:
    blob = b"\x00\xc6data" * 3000
    first = frame({"t": "shard", "shard": "s", "off": 0, "end": False}, blob)
    second = frame({"t": "end", "last": True})
    sock = FakeSocket(first + second, step=step)
    raw = recv_raw(sock, 1 << 20, "test")  # type: ignore[arg-type]  # fake socket
    assert bytes(raw.data) == first
    assert raw.fields["t"] == "shard" and raw.fields["end"] is False
    assert raw.blob is not None and bytes(raw.blob) == blob
    end = recv_raw(sock, 1 << 20, "test")  # type: ignore[arg-type]  # fake socket
    assert bytes(end.data) == second and end.blob is None
    assert end.fields["last"] is True and sock.left == 0


def test_relay_stream_receives_blobs_into_the_callers_buffer() -> None:
    a, b = b"A" * 1000, b"B" * 3000
    data = (
        frame({"t": "shard", "shard": "s", "off": 0}, a)
        + frame({"t": "lost", "node": "n2", "error": "x"})
        + frame({"t": "shard", "shard": "s", "off": 1000}, b)
        + frame({"t": "shard", "shard": "s", "off": 4000}, b"skipped")
        + frame({"t": "end", "last": True})
    )
    stream, sock = stream_over(data)
    target = bytearray(4000)
    head, size = stream.next_head()
    assert (head["off"], size) == (0, 1000)
    stream.recv_blob_into(memoryview(target)[:1000])
    head, size = stream.next_head()
    assert head["t"] == "lost" and size == 0
    head, size = stream.next_head()
    stream.recv_blob_into(memoryview(target)[1000:])
    assert bytes(target) == a + b
    head, size = stream.next_head()
    assert size == len(b"skipped")  # left unread: the next head skips it
    head, size = stream.next_head()
    assert head["t"] == "end" and sock.left == 0
    with pytest.raises(ValueError, match="does not fit"):
        stream.recv_blob_into(memoryview(bytearray(1)))


def test_relay_stream_raises_error_frames_and_broken_streams() -> None:
    error = wire.pack_frame(wire.error_reply("not_found", "no shard s"))[0]
    stream, _ = stream_over(bytes(error))
    with pytest.raises(ShardNotFoundError, match="no shard s"):
        stream.next_head()
    cut = frame({"t": "shard", "shard": "s", "off": 0}, b"x" * 2000)[:-10]
    stream, _ = stream_over(cut)
    stream.next_head()
    with pytest.raises(NodeUnavailableError, match="closed after"):
        stream.recv_blob_into(memoryview(bytearray(2000)))
    stream, _ = stream_over(cut[:300])
    with pytest.raises(NodeUnavailableError, match="closed after"):
        stream.next_head()
