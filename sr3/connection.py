"""What an op handler sees of a client connection, and request validation helpers.

See :mod:`sr3.server` for the op extension point these serve.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from sr3 import frame_io, wire
from sr3.config import NodeConfig
from sr3.errors import (
    ProtocolError,
    StorageError,
)
from sr3.replica_file import ReplicaReader, validate_shard_id

__all__ = ["Connection", "Handler", "require", "require_shard", "require_crc"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[["Connection", dict[str, Any]], Awaitable[None]]
_MAX_CRC = 0xFFFFFFFF
_THREAD_SEND_BYTES = 256 * 1024


def require(request: Mapping[str, Any], name: str, kind: type[T]) -> T:
    """Return ``request[name]`` if it is a ``kind`` (bool is not an int here).

    Raises:
        ProtocolError: the field is missing or has another type.
    """
    value = request.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        msg = (
            f"op {request.get('op')!r} needs field {name!r} of type {kind.__name__}, "
            f"got {type(value).__name__}"
        )
        raise ProtocolError(msg)
    return value


def require_shard(request: Mapping[str, Any]) -> str:
    """Return the request's ``shard`` field, a valid shard id.

    Raises:
        ProtocolError: missing, not a string, or not a usable shard id.
    """
    shard = require(request, "shard", str)
    try:
        validate_shard_id(shard)
    except StorageError as exc:
        raise ProtocolError(str(exc)) from exc
    return shard


def require_crc(request: Mapping[str, Any]) -> int:
    """Return the request's ``crc`` field, a 32-bit unsigned int."""
    crc = require(request, "crc", int)
    if not 0 <= crc <= _MAX_CRC:
        msg = f"op {request.get('op')!r}: crc {crc} is not an unsigned 32-bit value"
        raise ProtocolError(msg)
    return crc


class _SendError(Exception):
    """A reply failed after its first byte may have gone out (cause attached)."""


def _build_and_send(
    build: Callable[[], list[wire.Buffer]], sock_fd: int, timeout_s: float
) -> None:
    """Build a frame and write it on ``sock_fd``, then close it (worker thread).

    The thread owns ``sock_fd`` (a dup), so a cancelled handler cannot close it
    under the thread. Errors of ``build`` propagate as they are (nothing was
    sent); write errors become :class:`_SendError`.
    """
    try:
        parts = build()
        try:
            frame_io.write_parts(sock_fd, parts, timeout_s)
        except OSError as exc:
            raise _SendError(str(exc)) from exc
    finally:
        os.close(sock_fd)


def _sendfile_all(
    out_fd: int, in_fd: int, offset: int, count: int, timeout_s: float
) -> None:
    """Send ``count`` bytes of ``in_fd`` from ``offset`` on a non-blocking socket.

    The kernel moves page-cache pages to the socket: no copy through this
    process, no buffer to allocate.

    Raises:
        TimeoutError: the peer accepted no bytes for ``timeout_s``.
        OSError: the connection failed or the file ended early.
    """
    poller = select.poll()
    poller.register(out_fd, select.POLLOUT)
    while count > 0:
        try:
            sent = os.sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            if not poller.poll(timeout_s * 1000):
                msg = f"peer accepted no bytes for {timeout_s}s"
                raise TimeoutError(msg) from None
            continue
        if sent == 0:
            msg = f"file ended {count} bytes before the promised payload end"
            raise OSError(msg)
        offset += sent
        count -= sent


def _send_file_reply(
    produce: Callable[[], tuple[Mapping[str, Any], ReplicaReader]],
    blob_key: str | None,
    sock_fd: int,
    timeout_s: float,
) -> None:
    """Open a payload, then send its reply and the payload by ``os.sendfile``.

    Runs in a worker thread and owns ``sock_fd`` as :func:`_build_and_send`
    does. The payload is the frame's ``blob_key`` bin value, or with ``blob_key``
    None, follows the frame. Errors of ``produce`` propagate as they are
    (nothing was sent); write errors become :class:`_SendError`.
    """
    try:
        fields, reader = produce()
        with reader:
            frame = {"v": wire.PROTOCOL_VERSION, "ok": True, **fields}
            if blob_key is None:
                (head,) = wire.pack_frame(frame)
            else:
                head = wire.pack_frame_head(frame, blob_key, reader.remaining)
            try:
                frame_io.write_parts(sock_fd, [head], timeout_s)
                _sendfile_all(
                    sock_fd, reader.fileno(), reader.offset, reader.remaining, timeout_s
                )
            except OSError as exc:
                raise _SendError(str(exc)) from exc
    finally:
        os.close(sock_fd)


def _send_file_range(
    head: bytes, in_fd: int, offset: int, count: int, sock_fd: int, timeout_s: float
) -> None:
    """Send ``head`` then ``count`` bytes of ``in_fd`` from ``offset`` (worker thread).

    Owns ``sock_fd`` as :func:`_build_and_send` does; write errors become
    :class:`_SendError`.
    """
    try:
        try:
            frame_io.write_parts(sock_fd, [head], timeout_s)
            _sendfile_all(sock_fd, in_fd, offset, count, timeout_s)
        except OSError as exc:
            raise _SendError(str(exc)) from exc
    finally:
        os.close(sock_fd)


class Connection:
    """An authenticated client connection as op handlers see it.

    Attributes:
        peer: ``host:port`` of the client, for logs and messages.
        node_id: Id of this node.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str,
        node_id: str,
        config: NodeConfig,
    ) -> None:
        self.peer = peer
        self.node_id = node_id
        self.config = config
        self._reader = reader
        self._writer = writer

    async def send(
        self,
        msg: Mapping[str, Any],
        *,
        blob_key: str = "data",
        blob: wire.Buffer | None = None,
    ) -> None:
        """Send one frame (``"v"`` is added); ``blob`` is sent without copying.

        A large blob is written from a worker thread straight from its buffer
        (the transport would copy whatever the socket does not take at once).

        Raises:
            ConnectionError: the client went away; the connection is closed.
        """
        parts = wire.pack_frame(
            {"v": wire.PROTOCOL_VERSION, **msg}, blob_key=blob_key, blob=blob
        )
        if blob is None or memoryview(blob).nbytes < _THREAD_SEND_BYTES:
            for part in parts:
                self._writer.write(memoryview(part))
            await self._writer.drain()
            return
        await self._send_in_thread(lambda: parts)

    async def ok(
        self,
        fields: Mapping[str, Any] | None = None,
        *,
        blob_key: str = "data",
        blob: wire.Buffer | None = None,
    ) -> None:
        """Send a success reply ``{"ok": True, **fields}``."""
        await self.send({"ok": True, **(fields or {})}, blob_key=blob_key, blob=blob)

    async def ok_from_thread(
        self,
        produce: Callable[[], tuple[Mapping[str, Any], wire.Buffer]],
        *,
        blob_key: str = "data",
    ) -> None:
        """Run blocking ``produce()`` in a worker thread and send its reply from there.

        ``produce`` returns ``(fields, blob)`` of a success reply; a file read and
        its reply thus cost one thread hop.

        Raises:
            Exception: whatever ``produce`` raised (nothing was sent).
            ConnectionError: the client went away; the connection is closed.
        """

        def build() -> list[wire.Buffer]:
            fields, blob = produce()
            frame = {"v": wire.PROTOCOL_VERSION, "ok": True, **fields}
            return wire.pack_frame(frame, blob_key=blob_key, blob=blob)

        await self._send_in_thread(build)

    async def ok_file_from_thread(
        self,
        produce: Callable[[], tuple[Mapping[str, Any], ReplicaReader]],
        *,
        blob_key: str | None = "data",
    ) -> None:
        """Send a success reply whose blob is the unread payload of a replica file.

        Like :meth:`ok_from_thread`, but ``produce`` returns ``(fields, reader)``
        and the payload goes from the page cache to the socket by
        ``os.sendfile``, never through this process. The node checks no crc32
        on the way (see :meth:`ReplicaReader.fileno`): the client does. With
        ``blob_key`` None the payload's bytes follow the reply frame instead of
        ending it (``fields`` must tell the client their count).

        Raises:
            Exception: whatever ``produce`` raised (nothing was sent).
            ConnectionError: the client went away; the connection is closed.
        """
        await self._in_thread(_send_file_reply, produce, blob_key)

    async def send_encoded(self, parts: list[wire.Buffer]) -> None:
        """Send bytes that already form whole frames (a relay forwarding frames).

        Nothing is checked or re-encoded: the caller guarantees the parts are
        complete frames of this protocol. Large parts are written from a worker
        thread straight from their buffers, as :meth:`send` does.

        Raises:
            ConnectionError: the client went away; the connection is closed.
        """
        if sum(memoryview(p).nbytes for p in parts) < _THREAD_SEND_BYTES:
            for part in parts:
                self._writer.write(memoryview(part))
            await self._writer.drain()
            return
        await self._send_in_thread(lambda: parts)

    async def ok_file_range(
        self,
        fields: Mapping[str, Any],
        fd: int,
        offset: int,
        count: int,
        *,
        blob_key: str = "data",
    ) -> None:
        """Send ``{"ok": True, **fields}`` with ``count`` bytes of a file as its blob.

        The bytes go from file descriptor ``fd`` at ``offset`` to the socket by
        ``os.sendfile`` in a worker thread, never through this process. As with
        :meth:`ok_file_from_thread`, nothing checks them on the way: only a
        caller whose receiver checks them end to end may use it. The caller
        keeps ``fd`` open until this returns.

        Raises:
            ProtocolError: the fields are not msgpack-able.
            ConnectionError: the client went away; the connection is closed.
        """
        frame = {"v": wire.PROTOCOL_VERSION, "ok": True, **fields}
        head = wire.pack_frame_head(frame, blob_key, count)
        await self._in_thread(_send_file_range, head, fd, offset, count)

    async def _send_in_thread(self, build: Callable[[], list[wire.Buffer]]) -> None:
        await self._in_thread(_build_and_send, build)

    async def _in_thread(self, worker: Callable[..., None], *args: Any) -> None:
        """Run ``worker(*args, sock_fd, timeout_s)`` writing on a dup of the socket."""
        await self._writer.drain()  # write limits are 0: the buffer is now empty
        sock = self._writer.get_extra_info("socket")
        sock_fd = os.dup(sock.fileno())  # stays valid if the transport closes
        timeout_s = self.config.io_timeout_s
        try:
            await asyncio.to_thread(worker, *args, sock_fd, timeout_s)
        except _SendError as exc:
            self._writer.close()
            msg = f"sending a reply to {self.peer} failed: {exc.__cause__}"
            raise ConnectionAbortedError(msg) from exc.__cause__

    async def error(self, code: str, error: str) -> None:
        """Send a failure reply (``code`` from :data:`sr3.wire.ERROR_CODES`)."""
        await self.send(wire.error_reply(code, error))

    @property
    def closing(self) -> bool:
        """Whether the connection is closed or closing."""
        return self._writer.is_closing()

    async def recv(self) -> dict[str, Any]:
        """Read the client's next frame within the I/O timeout.

        Raises:
            ProtocolError: the client closed, stalled or sent a bad frame; the
                server closes the connection after the handler returns.
        """
        try:
            async with asyncio.timeout(self.config.io_timeout_s):
                frame = await frame_io.read_frame(
                    self._reader, self.config.max_frame_bytes
                )
        except TimeoutError as exc:
            self._writer.close()
            msg = f"client {self.peer} sent no frame within {self.config.io_timeout_s}s"
            raise ProtocolError(msg) from exc
        except ProtocolError:
            self._writer.close()
            raise
        if frame is None:
            self._writer.close()
            msg = f"client {self.peer} closed the connection mid-exchange"
            raise ProtocolError(msg)
        return frame
