"""Multilang framing, serializers and message parsing, checked against pystorm."""

from __future__ import annotations

import io
import threading

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pystorm.serializers.json_serializer import JSONSerializer as PystormJson
from pystorm.serializers.msgpack_serializer import MsgpackSerializer as PystormMsgpack

from storm_bridge.errors import MultilangProtocolError, StormBridgeError
from storm_bridge.messages import bolt_tuple_msg, handshake_msg
from storm_bridge.multilang import get_serializer

JSON = get_serializer("json")
MSGPACK = get_serializer("msgpack")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def read_all(serializer_name: str, data: bytes) -> list[object]:
    serializer = get_serializer(serializer_name)
    return list(
        serializer.iter_messages(io.BytesIO(data), component="split", task_id=7)
    )


def pystorm_reader(cls: type, data: bytes) -> object:
    lock = threading.RLock()
    return cls(io.BytesIO(data), io.BytesIO(), lock, lock)


class TestJsonFraming:
    def test_encode_is_compact_json_then_end_line(self) -> None:
        data = JSON.encode({"command": "next", "id": ""})
        assert data == b'{"command":"next","id":""}\nend\n'

    def test_non_ascii_travels_as_utf8(self) -> None:
        data = JSON.encode(["café", "😀"])
        assert data == '["café","😀"]\nend\n'.encode()

    def test_reads_messages_written_by_pystorm(self) -> None:
        pystorm = pystorm_reader(PystormJson, b"")
        frames = pystorm.serialize_dict({"command": "emit", "tuple": ["dog", 1]})
        frames += pystorm.serialize_dict({"command": "sync"})
        expected = '{"command": "emit", "tuple": ["dog", 1]}\nend\n'
        assert frames == expected + '{"command": "sync"}\nend\n'
        assert read_all("json", frames.encode()) == [
            {"command": "emit", "tuple": ["dog", 1]},
            {"command": "sync"},
        ]

    def test_pystorm_reads_what_we_write(self) -> None:
        message = bolt_tuple_msg("-42", "spout", "default", 3, ["snow white", 7])
        reader = pystorm_reader(PystormJson, JSON.encode(message) + JSON.encode([4, 5]))
        assert reader.read_message() == message
        assert reader.read_message() == [4, 5]

    def test_lines_are_joined_until_end_as_storm_does(self) -> None:
        data = b'{"command":\r\n"sync"}\r\nend\r\n'
        assert read_all("json", data) == [{"command": "sync"}]

    def test_garbage_names_component_and_task(self) -> None:
        with pytest.raises(MultilangProtocolError) as info:
            read_all("json", b"hello world\nend\n")
        error = info.value
        assert (error.component, error.task_id) == ("split", 7)
        assert "component 'split' task 7" in str(error)
        assert "hello world" in str(error)
        assert isinstance(error, StormBridgeError)

    def test_eof_inside_a_message_is_an_error(self) -> None:
        with pytest.raises(MultilangProtocolError, match="middle of a message"):
            read_all("json", b'{"command": "sync"}\n')

    def test_oversized_message_is_an_error(self) -> None:
        reader = JSON.reader(
            io.BytesIO(b"x" * 100 + b"\n"), component="c", task_id=1, max_frame_bytes=10
        )
        with pytest.raises(MultilangProtocolError, match="larger than 10 bytes"):
            reader.read()

    def test_clean_eof(self) -> None:
        reader = JSON.reader(io.BytesIO(b""), component="c", task_id=1)
        with pytest.raises(EOFError):
            reader.read()


class TestMsgpackFraming:
    def test_bare_msgpack_values(self) -> None:
        message = {"command": "next", "id": ""}
        assert MSGPACK.encode(message) == msgpack.packb(message, use_bin_type=True)

    def test_reads_messages_written_by_pystorm(self) -> None:
        pystorm = pystorm_reader(PystormMsgpack, b"")
        frames = pystorm.serialize_dict({"command": "emit", "tuple": ["dog", 1]})
        frames += pystorm.serialize_dict({"command": "sync"})
        assert read_all("msgpack", frames) == [
            {"command": "emit", "tuple": ["dog", 1]},
            {"command": "sync"},
        ]

    def test_pystorm_reads_what_we_write(self) -> None:
        message = handshake_msg({"topology.name": "t"}, "/tmp/pids", {"taskid": 3})
        reader = pystorm_reader(PystormMsgpack, MSGPACK.encode(message))
        assert reader.read_message() == message

    def test_split_reads_reassemble(self) -> None:
        data = MSGPACK.encode({"command": "sync"}) * 3

        class Trickle(io.BytesIO):
            def read1(self, size: int = -1) -> bytes:
                return super().read1(min(size, 3))

        reader = MSGPACK.reader(Trickle(data), component="c", task_id=1)
        assert [reader.read() for _ in range(3)] == [{"command": "sync"}] * 3

    def test_garbage_names_component_and_task(self) -> None:
        with pytest.raises(MultilangProtocolError, match="component 'split' task 7"):
            read_all("msgpack", b"\xc1\xc1")

    def test_eof_inside_a_message_is_an_error(self) -> None:
        data = MSGPACK.encode({"command": "sync"})[:-2]
        with pytest.raises(MultilangProtocolError, match="middle of a msgpack"):
            read_all("msgpack", data)


@pytest.mark.parametrize("name", ["json", "msgpack"])
@given(value=json_values)
def test_round_trip(name: str, value: object) -> None:
    assert read_all(name, get_serializer(name).encode({"tuple": [value]})) == [
        {"tuple": [value]}
    ]


def test_unknown_serializer() -> None:
    with pytest.raises(ValueError, match="unknown multilang serializer 'xml'"):
        get_serializer("xml")
