"""Node side of relays: frames stay whole and in order, own shards read lazily."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from sr3.config import NodeConfig
from sr3.recovery.frames import FrameSender, RelayFaults
from sr3.recovery.line import RELAY_CHUNK_BYTES, relay_chunk_bytes
from sr3.recovery.pieces import Piece
from sr3.recovery.tree_node import _OwnSource


class FakeConnection:
    """Records what a FrameSender writes; each write yields to other tasks."""

    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        self.closing = False
        self.sent: list[tuple[str, Any]] = []

    async def _write(self, kind: str, what: Any) -> None:
        self.sent.append((kind + ":start", what))
        await asyncio.sleep(0)  # a real write drains: the other producer runs
        self.sent.append((kind + ":end", what))

    async def ok(
        self, fields: Mapping[str, Any] | None = None, *, blob: Any = None
    ) -> None:
        await self._write("ok", dict(fields or {}))

    async def send_encoded(self, parts: list[bytes]) -> None:
        await self._write("raw", b"".join(parts))

    async def ok_file_range(
        self, fields: Mapping[str, Any], fd: int, offset: int, count: int
    ) -> None:
        await self._write("file", (fields["n"], offset, count))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_frames_of_two_producers_never_interleave() -> None:
    conn = FakeConnection()
    sender = FrameSender(conn, RelayFaults())  # type: ignore[arg-type]  # a fake conn

    async def own() -> None:
        for n in range(20):
            await sender.send_file({"n": n}, 3, n * 10, 10)

    async def forwarded() -> None:
        for n in range(20):
            await sender.send_encoded(bytes([n]) * 5, blob_bytes=5)

    async def both() -> None:
        await asyncio.gather(own(), forwarded())

    run(both())
    kinds = [k for k, _ in conn.sent]
    assert len(kinds) == 80
    for start, end in zip(kinds[::2], kinds[1::2], strict=True):
        assert start.endswith(":start") and end == start.replace("start", "end")
    raw = [w for k, w in conn.sent if k == "raw:end"]
    assert raw == [bytes([n]) * 5 for n in range(20)]  # forwarded unchanged
    assert sender.frames == 40 and sender.bytes == 20 * 10 + 20 * 5


def test_injected_abort_stops_every_kind_of_frame() -> None:
    conn = FakeConnection()
    sender = FrameSender(conn, RelayFaults(abort_after_frames=2))  # type: ignore[arg-type]  # fake

    async def go() -> None:
        await sender.send_encoded(b"x")
        await sender.send_file({"n": 1}, 3, 0, 1)
        with pytest.raises(ConnectionAbortedError):
            await sender.send_encoded(b"y")
        with pytest.raises(ConnectionAbortedError):
            await sender.send_file({"n": 2}, 3, 0, 1)
        with pytest.raises(ConnectionAbortedError):
            await sender.send({"t": "lost"})

    run(go())
    assert [k for k, _ in conn.sent] == [
        "raw:start",
        "raw:end",
        "file:start",
        "file:end",
    ]


def test_own_shards_are_read_only_when_the_merge_reaches_them() -> None:
    blobs = {
        "s0": [Piece(0, 1, 1, b"a"), Piece(1, 1, 1, b"b")],
        "s5": [Piece(5, 1, 1, b"c"), Piece(9, 1, 1, b"d")],
        "d3": [Piece(3, 2, 2, b"e"), Piece(5, 2, 2, b"f")],
    }
    loaded: list[str] = []

    async def load(sid: str) -> list[Piece]:
        loaded.append(sid)
        return blobs[sid]

    source = _OwnSource([(5, "s5"), (0, "s0"), (3, "d3")], load)

    async def drain() -> list[tuple[int, int]]:
        got = []
        while (held := await source.next()) is not None:
            got.append((held.piece.kg, held.piece.lo))
            if held.piece.kg == 1:
                assert loaded == ["s0"]  # nothing beyond key group 1 read yet
        return got

    order = run(drain())
    assert order == [(0, 1), (1, 1), (3, 2), (5, 1), (5, 2), (9, 1)]
    assert loaded == ["s0", "d3", "s5"]


def test_chains_ask_for_large_chunks_within_the_frame_bound() -> None:
    assert relay_chunk_bytes(NodeConfig()) == RELAY_CHUNK_BYTES
    small = NodeConfig(max_frame_bytes=4 * 1024 * 1024, chunk_bytes=65536)
    assert relay_chunk_bytes(small) == 2 * 1024 * 1024
    big = NodeConfig(chunk_bytes=16 * 1024 * 1024)
    assert relay_chunk_bytes(big) == 16 * 1024 * 1024
