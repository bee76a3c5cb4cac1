"""Relay streams, a node's side: its connection to the next node up a structure.

A relaying node reads each upstream frame whole into a buffer of its own, decodes
only the head (the blob travels last, see :mod:`sr3.recovery.transport`) and
forwards the bytes exactly as they arrived.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sr3 import frame_io, wire
from sr3.config import NodeConfig
from sr3.errors import NodeUnavailableError, ProtocolError, SR3Error
from sr3.recovery.frames import RelayNode
from sr3.recovery.transport import (
    BLOB_MARK,
    HEAD_BYTES,
    open_socket,
    raise_error_frame,
    split_head,
)

__all__ = ["RawFrame", "Upstream", "recv_raw"]

T = TypeVar("T")


@dataclass(frozen=True)
class RawFrame:
    """A frame as it arrived, with its fields decoded up to the blob.

    Attributes:
        fields: The frame's fields (without ``data`` when it carries a blob).
        data: The whole frame, length prefix included: forward it unchanged.
        blob_at: Offset of the trailing blob in ``data``; None without one (then
            ``fields`` is the whole frame).
    """

    fields: dict[str, Any]
    data: bytearray
    blob_at: int | None

    @property
    def blob(self) -> memoryview | None:
        """The trailing blob, a view into :attr:`data` (None without one)."""
        return None if self.blob_at is None else memoryview(self.data)[self.blob_at :]


def recv_raw(sock: socket.socket, max_frame_bytes: int, where: str) -> RawFrame:
    """Receive one whole frame into a buffer of its own (blocking; worker thread)."""
    prefix = bytearray(4)
    frame_io.recv_exactly(sock, memoryview(prefix), where)
    length = int.from_bytes(prefix, "big")
    if length > max_frame_bytes:
        msg = f"{where}: frame of {length} bytes exceeds the frame bound"
        raise ProtocolError(msg)
    data = bytearray(4 + length)
    data[:4] = prefix
    frame_io.recv_exactly(sock, memoryview(data)[4:], where)
    split = None
    if length > len(BLOB_MARK):
        split = split_head(memoryview(data)[4 : 4 + HEAD_BYTES], length)
    if split is not None:
        return RawFrame(split[0], data, 4 + split[1])
    return RawFrame(wire.decode_body(memoryview(data)[4:]), data, None)


class Upstream:
    """A node's connection to the next node up a relay structure.

    Open with :meth:`open`; read frames with :meth:`next_raw`; always :meth:`close`.
    The socket is blocking and every read runs in a worker thread: a frame
    arrives with one thread hop, straight into a buffer of its own, and the
    event loop stays free for the node's other work.
    """

    def __init__(self, node: RelayNode, sock: socket.socket, config: NodeConfig):
        self.node = node
        self._sock = sock
        self._config = config
        self._where = f"relay from node {node.node_id} ({node.host}:{node.port})"
        self._busy: asyncio.Future[Any] | None = None
        self._closed = False

    @classmethod
    async def open(
        cls, node: RelayNode, request: Mapping[str, Any], config: NodeConfig
    ) -> Upstream:
        """Connect, authenticate and send ``request``.

        Raises:
            NodeUnavailableError: the node cannot be reached or refused us.
        """
        where = f"relay to node {node.node_id} ({node.host}:{node.port})"

        def connect() -> socket.socket:
            sock = open_socket(node.host, node.port, config)
            try:
                frame_io.send_frame(sock, {"v": wire.PROTOCOL_VERSION, **request})
            except BaseException:
                sock.close()
                raise
            return sock

        try:
            sock = await asyncio.to_thread(connect)
        except (OSError, SR3Error) as exc:
            msg = f"{where}: cannot start the relay: {exc!r}"
            raise NodeUnavailableError(msg) from exc
        return cls(node, sock, config)

    async def _run(self, work: Callable[[], T]) -> T:
        """Run a blocking read in a worker thread; :meth:`close` waits for it."""
        if self._closed:
            msg = f"{self._where}: the connection is closed"
            raise NodeUnavailableError(msg)
        loop = asyncio.get_running_loop()
        self._busy = loop.run_in_executor(None, work)
        # shielded: a cancelled reader leaves the read to finish (close ends it)
        result: T = await asyncio.shield(self._busy)
        return result

    async def next_raw(self) -> RawFrame:
        """Return the next frame as it arrived (the ``end`` frame last).

        Raises:
            NodeUnavailableError: the node died, stalled, or sent an error frame.
        """
        limit = self._config.max_frame_bytes
        try:
            frame = await self._run(lambda: recv_raw(self._sock, limit, self._where))
        except (OSError, ProtocolError) as exc:
            msg = f"{self._where} broke: {exc!r}"
            raise NodeUnavailableError(msg) from exc
        if frame.fields.get("ok") is not True:
            try:
                raise_error_frame(frame.fields, self._where)
            except SR3Error as exc:
                raise NodeUnavailableError(str(exc)) from exc
        return frame

    async def close(self) -> None:
        """Close the connection (no error if already closed).

        A read still running in its thread is woken by a shutdown and waited for
        before the socket is closed, so it never reads a reused descriptor.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected any more
        busy = self._busy
        if busy is not None and not busy.done():
            await asyncio.wait([busy], timeout=self._config.io_timeout_s)
        if busy is not None and busy.done() and not busy.cancelled():
            busy.exception()  # retrieved: the reader that wanted it is gone
        self._sock.close()
