r"""Storm's multilang wire protocol, Storm's side: framing, serializers, messages.

Two serializers, as pystorm speaks them:

* ``json``: every message is one UTF-8 JSON value followed by a line holding only
  ``end`` (``<json>\\nend\\n``), both ways. Reading follows Storm's
  ``JsonSerializer.readString``: lines (``\\n`` or ``\\r\\n`` terminated) are
  collected until a line equal to ``end`` and joined with ``\\n``.
* ``msgpack``: a bare stream of msgpack maps, no delimiter (pystorm's
  ``MsgpackSerializer``: ``msgpack.packb`` out, ``msgpack.Unpacker`` in).

A subprocess that writes anything else gets a :class:`MultilangProtocolError`
naming its component and task. What the messages mean is in
:mod:`storm_bridge.messages`.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterator, Mapping
from typing import IO, Any, Final

import msgpack

from storm_bridge.errors import E_STDOUT, MultilangProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "SERIALIZERS",
    "FrameReader",
    "JsonSerializer",
    "MsgpackSerializer",
    "Serializer",
    "get_serializer",
]

DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
_READ_CHUNK_BYTES: Final = 64 * 1024
_SNIPPET_CHARS: Final = 200


def _snippet(data: bytes | str) -> str:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    return repr(text[:_SNIPPET_CHARS]) + ("..." if len(text) > _SNIPPET_CHARS else "")


class FrameReader(abc.ABC):
    """Reads whole messages from a subprocess's stdout (a binary stream).

    Attributes:
        component: Component id, used in error messages.
        task_id: Task id, used in error messages.
    """

    def __init__(
        self,
        stream: IO[bytes],
        *,
        component: str,
        task_id: int,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self._stream = stream
        self.component = component
        self.task_id = task_id
        self._max_frame_bytes = max_frame_bytes

    def _error(self, detail: str) -> MultilangProtocolError:
        return MultilangProtocolError(self.component, self.task_id, detail)

    @abc.abstractmethod
    def read(self) -> Any:
        """Return the next decoded message.

        Raises:
            EOFError: the stream ended cleanly between two messages.
            MultilangProtocolError: the bytes are not a valid message, or the
                stream ended inside one.
        """


class _JsonFrameReader(FrameReader):
    def read(self) -> Any:
        lines: list[bytes] = []
        size = 0
        while True:
            line = self._stream.readline(self._max_frame_bytes + 1)
            if not line:
                if lines:
                    partial = _snippet(b"".join(lines))
                    msg = f"pipe closed in the middle of a message: {partial}"
                    raise self._error(msg)
                raise EOFError
            line = line.rstrip(b"\n").rstrip(b"\r")
            if line == b"end":
                break
            lines.append(line)
            size += len(line) + 1
            if size > self._max_frame_bytes:
                limit = self._max_frame_bytes
                msg = f"message larger than {limit} bytes without an 'end' line"
                raise self._error(msg)
        raw = b"\n".join(lines)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            msg = (
                f"wrote something that is not a JSON message: {_snippet(raw)} "
                f"({exc}); {E_STDOUT}"
            )
            raise self._error(msg) from exc


class _MsgpackFrameReader(FrameReader):
    def __init__(
        self,
        stream: IO[bytes],
        *,
        component: str,
        task_id: int,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__(
            stream,
            component=component,
            task_id=task_id,
            max_frame_bytes=max_frame_bytes,
        )
        # strict_map_key=False: tuple values may hold maps with int keys.
        self._unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=False, max_buffer_size=max_frame_bytes
        )
        self._buffered = 0

    def read(self) -> Any:
        while True:
            try:
                message = next(self._unpacker)
            except StopIteration:
                pass
            except (ValueError, msgpack.ExtraData, msgpack.StackError) as exc:
                msg = f"wrote bytes that are not msgpack ({exc}); {E_STDOUT}"
                raise self._error(msg) from exc
            else:
                self._buffered = 0
                return message
            chunk = self._read_chunk()
            if not chunk:
                if self._buffered:
                    msg = "pipe closed in the middle of a msgpack message"
                    raise self._error(msg)
                raise EOFError
            self._buffered += len(chunk)
            try:
                self._unpacker.feed(chunk)
            except msgpack.BufferFull as exc:
                msg = f"msgpack message larger than {self._max_frame_bytes} bytes"
                raise self._error(msg) from exc

    def _read_chunk(self) -> bytes:
        read1 = getattr(self._stream, "read1", None)
        if read1 is not None:
            return bytes(read1(_READ_CHUNK_BYTES))
        return self._stream.read(_READ_CHUNK_BYTES)


class Serializer(abc.ABC):
    """Encodes messages for a subprocess and builds readers for its replies.

    Attributes:
        name: The name ``streamparse_run -s`` knows the serializer by.
        frame_reader: The :class:`FrameReader` of its framing.
    """

    name: str
    frame_reader: type[FrameReader]

    @abc.abstractmethod
    def encode(self, message: object) -> bytes:
        """Return the framed bytes of one message (a map or a list of task ids).

        Raises:
            TypeError: the message holds values the format cannot encode.
        """

    def reader(
        self,
        stream: IO[bytes],
        *,
        component: str,
        task_id: int,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> FrameReader:
        """Return a reader of this serializer's frames from ``stream``."""
        return self.frame_reader(
            stream,
            component=component,
            task_id=task_id,
            max_frame_bytes=max_frame_bytes,
        )

    def iter_messages(
        self, stream: IO[bytes], *, component: str, task_id: int
    ) -> Iterator[Any]:
        """Yield the messages of ``stream`` until its clean end.

        Raises:
            MultilangProtocolError: the stream holds an invalid message.
        """
        reader = self.reader(stream, component=component, task_id=task_id)
        while True:
            try:
                yield reader.read()
            except EOFError:
                return


class JsonSerializer(Serializer):
    """Storm's default ``org.apache.storm.multilang.JsonSerializer`` framing."""

    name = "json"
    frame_reader = _JsonFrameReader

    def encode(self, message: object) -> bytes:  # noqa: D102 (documented on the ABC)
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\nend\n"


class MsgpackSerializer(Serializer):
    """pystorm's msgpack framing: bare concatenated msgpack values."""

    name = "msgpack"
    frame_reader = _MsgpackFrameReader

    def encode(self, message: object) -> bytes:  # noqa: D102
        return msgpack.packb(message, use_bin_type=True)


SERIALIZERS: Final[Mapping[str, Serializer]] = {
    "json": JsonSerializer(),
    "msgpack": MsgpackSerializer(),
}


def get_serializer(name: str) -> Serializer:
    """Return the serializer called ``name`` (``json`` or ``msgpack``).

    Raises:
        ValueError: no serializer has that name.
    """
    try:
        return SERIALIZERS[name]
    except KeyError:
        msg = f"unknown multilang serializer {name!r}; use one of {sorted(SERIALIZERS)}"
        raise ValueError(msg) from None
