"""The delay process's reading of netfilter queue messages (pure: no netlink)."""

from __future__ import annotations

import struct

import pytest

from sr3_cli.netdelay import packet_ids


def _nlmsg(kind: int, body: bytes) -> bytes:
    size = 16 + len(body)
    return struct.pack("=IHHII", size, kind, 0, 0, 0) + body + b"\0" * (-size % 4)


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _packet(packet_id: int, *, hdr_first: bool = True) -> bytes:
    nfgen = struct.pack("=BBH", 2, 0, 0)
    hdr = _attr(1, struct.pack("!IHB", packet_id, 0x0800, 0))
    mark = _attr(3, struct.pack("!I", 7))
    attrs = hdr + mark if hdr_first else mark + hdr
    return _nlmsg(0x300, nfgen + attrs)


def test_every_queued_packet_of_a_read_is_found_in_order() -> None:
    data = _packet(5) + _packet(6, hdr_first=False) + _packet(0xFFFFFFFF)
    assert packet_ids(data) == [5, 6, 0xFFFFFFFF]


def test_an_ack_is_no_packet_and_an_error_is_raised_with_its_errno() -> None:
    ack = _nlmsg(2, struct.pack("=i", 0) + b"\0" * 16)
    assert packet_ids(ack + _packet(9)) == [9]
    refused = _nlmsg(2, struct.pack("=i", -1) + b"\0" * 16)
    with pytest.raises(OSError, match="Operation not permitted") as caught:
        packet_ids(refused)
    assert caught.value.errno == 1


def test_a_truncated_read_stops_at_the_last_whole_message() -> None:
    assert packet_ids(_packet(1) + _packet(2)[:10]) == [1]
    assert packet_ids(_packet(1) + _packet(2)[:30]) == [1]
