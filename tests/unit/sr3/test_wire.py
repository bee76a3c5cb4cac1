import asyncio
import hashlib
import hmac
import socket
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sr3 import frame_io, wire
from sr3.errors import NodeUnavailableError, ProtocolError

LIMIT = 64 * 1024


def frame_bytes(msg: dict[str, Any], **kwargs: Any) -> bytes:
    return b"".join(bytes(part) for part in wire.pack_frame(msg, **kwargs))


def body_of(frame: bytes) -> bytes:
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    return frame[4:]


def read_async(data: bytes, max_frame_bytes: int = LIMIT) -> dict[str, Any] | None:
    async def run() -> dict[str, Any] | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await frame_io.read_frame(reader, max_frame_bytes)

    return asyncio.run(run())


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text()
    | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_round_trip_of_any_map(msg: dict[str, Any]) -> None:
    assert wire.decode_body(body_of(frame_bytes(msg))) == msg


@given(st.binary(max_size=2048), st.integers(0, 2**32 - 1))
def test_blob_frame_is_a_plain_msgpack_map(blob: bytes, crc: int) -> None:
    msg = {"v": 1, "ok": True, "crc": crc}
    parts = wire.pack_frame(msg, blob=blob)
    assert parts[1] is blob  # the payload is not copied
    body = body_of(frame_bytes(msg, blob=blob))
    assert msgpack.unpackb(body) == {**msg, "data": blob}
    assert wire.decode_body(body) == {**msg, "data": blob}


def test_blob_key_is_configurable() -> None:
    body = body_of(frame_bytes({"ok": True}, blob_key="chunk", blob=b"xy"))
    assert wire.decode_body(body) == {"ok": True, "chunk": b"xy"}


def test_unpackable_message_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not msgpack-able"):
        wire.pack_frame({"x": object()})
    with pytest.raises(ProtocolError, match="not msgpack-able"):
        wire.pack_frame({"x": object()}, blob=b"")
    with pytest.raises(ProtocolError, match="cannot frame"):
        wire.pack_frame({"data": 1}, blob=b"")


def test_async_read_round_trip_and_clean_eof() -> None:
    assert read_async(frame_bytes({"op": "ping", "v": 1})) == {"op": "ping", "v": 1}
    assert read_async(b"") is None


def test_async_read_rejects_oversize_without_reading_it() -> None:
    header = struct.pack(">I", LIMIT + 1)
    with pytest.raises(ProtocolError, match="exceeds"):
        read_async(header)  # no body follows: the bound is checked first


@pytest.mark.parametrize("data", [b"\x00\x00", struct.pack(">I", 10) + b"\x80"])
def test_async_read_rejects_truncated_frames(data: bytes) -> None:
    with pytest.raises(ProtocolError, match="stream ended"):
        read_async(data)


def nested(depth: int) -> bytes:
    return b"\x81\xa1k" + b"\x91" * (depth - 1) + b"\xc0"


BAD_BODIES = {
    "not msgpack": b"\xc1",
    "not a map": msgpack.packb([1, 2]),
    "int key": b"\x81\x01\x02",
    "bad utf-8": b"\x81\xa1k\xa2\xff\xfe",
    "trailing bytes": msgpack.packb({"a": 1}) + b"\xc0",
    "ext type": msgpack.packb({"a": msgpack.ExtType(5, b"ab")}),
    "empty ext type": msgpack.packb({"a": msgpack.ExtType(5, b"")}),
    "timestamp": msgpack.packb({"a": msgpack.Timestamp(1, 0)}),
    "huge str": b"\x81\xa1k\xdb\xff\xff\xff\xff",
    "huge bin": b"\x81\xa1k\xc6\xff\xff\xff\xff",
    "huge array": b"\x81\xa1k\xdd\xff\xff\xff\xff",
    "huge map": b"\xdf\xff\xff\xff\xff",
    "deep for msgpack": nested(5000),
    "deep for sr3": nested(wire.MAX_DEPTH + 1),
    "empty": b"",
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_hostile_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        wire.decode_body(body)


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert wire.decode_body(nested(wire.MAX_DEPTH))["k"] is not None


def test_auth_mac_is_hmac_sha256_of_context_and_nonce() -> None:
    nonce = bytes(range(32))
    expected = hmac.new(b"s3cret", b"sr3-auth-v1" + nonce, hashlib.sha256).digest()
    assert wire.auth_mac("s3cret", nonce) == expected
    assert wire.check_mac("s3cret", nonce, expected)
    assert not wire.check_mac("other", nonce, expected)
    assert not wire.check_mac("s3cret", nonce, "not bytes")
    assert not wire.check_mac("s3cret", nonce, expected[:-1])


def test_error_reply_shape_and_codes() -> None:
    assert wire.error_reply("not_found", "shard x") == {
        "v": 1,
        "ok": False,
        "code": "not_found",
        "error": "shard x",
    }
    with pytest.raises(ValueError, match="unknown error code"):
        wire.error_reply("oops", "x")


def test_blocking_send_and_recv_reuse_a_buffer() -> None:
    left, right = socket.socketpair()
    with left, right:
        buffer = bytearray()
        frame_io.send_frame(left, {"ok": True}, blob=b"a" * 5000)
        frame_io.send_frame(left, {"ok": False})
        assert frame_io.recv_frame(right, LIMIT, buffer)["data"] == b"a" * 5000
        assert len(buffer) >= 5000
        assert frame_io.recv_frame(right, LIMIT, buffer) == {"ok": False}


def test_blocking_recv_bounds_and_eof() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(struct.pack(">I", LIMIT + 1))
        with pytest.raises(ProtocolError, match="exceeds"):
            frame_io.recv_frame(right, LIMIT)
    left, right = socket.socketpair()
    with left, right:
        left.sendall(struct.pack(">I", 100) + b"\x80")
        left.close()
        with pytest.raises(NodeUnavailableError, match="closed after 1 of 100"):
            frame_io.recv_frame(right, LIMIT)


@pytest.mark.parametrize(
    "msg",
    [
        {"ok": True, "crc": 7, "data": b"z" * 200_000},  # payload last: read in place
        {"data": b"z" * 200_000, "ok": True},  # payload not last
        {"ok": True, "text": "t" * 100_000},  # no payload
        {"k": ["x" * 300] * 400, "data": b"z" * 70_000},  # head longer than the peek
    ],
    ids=["blob last", "blob first", "str", "long head"],
)
def test_large_frames_decode_alike_on_both_paths(msg: dict[str, Any]) -> None:
    left, right = socket.socketpair()
    with left, right:
        if list(msg)[-1] == "data":
            head = {k: v for k, v in msg.items() if k != "data"}
            frame_io.send_frame(left, head, blob=msg["data"])
        else:
            frame_io.send_frame(left, msg)
        assert frame_io.recv_frame(right, 1 << 20) == msg


def test_large_hostile_frame_is_still_rejected() -> None:
    left, right = socket.socketpair()
    with left, right:
        body = (
            b"\x82\xa1k" + b"\x91" * 100_000 + b"\xc0" + b"\xa1d\xc6\x00\x00\x00\x01x"
        )
        left.sendall(struct.pack(">I", len(body)) + body)
        with pytest.raises(ProtocolError):
            frame_io.recv_frame(right, 1 << 20)
