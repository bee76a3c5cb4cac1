"""A ring node's asyncio TCP server: authenticates peers and serves replica ops.

Each connection starts with the HMAC handshake of :mod:`sr3.wire`, then reads
requests one at a time: a request is answered (one frame, or several for
``stream``) before the next is read, while connections run concurrently. Bad
input gets an error reply and/or a closed connection, is logged at WARNING with
the peer address, and never touches stored data.

Extension point: :meth:`NodeServer.register_op` adds an op. Its handler is
``async def handler(conn: Connection, request: dict) -> None``; it validates the
request with :func:`require`, replies with :meth:`Connection.ok` /
:meth:`Connection.send` (one or more frames), may read further frames of the
same exchange with :meth:`Connection.recv`, and reports failure by raising:
``ProtocolError`` -> ``bad_request``, ``ShardNotFoundError`` -> ``not_found``,
``ChecksumError`` -> ``corrupt``, any other ``SR3Error`` -> ``internal``; any
other exception is a bug: it is logged with its traceback, answered with
``internal`` and the connection is closed. The error frame ends a multi-frame
reply. Blocking work (file I/O, the blocking client) belongs in a worker thread
(``asyncio.to_thread`` or :meth:`Connection.ok_from_thread`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import socket
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from sr3 import wire
from sr3.client import ClientPool
from sr3.config import NodeConfig, Sr3Config
from sr3.errors import (
    ChecksumError,
    ConfigError,
    ProtocolError,
    ShardNotFoundError,
    SR3Error,
    StorageError,
)
from sr3.storage import ReplicaStore, validate_shard_id

__all__ = ["Connection", "Handler", "NodeServer", "main", "require", "require_shard"]

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


def _require_crc(request: Mapping[str, Any]) -> int:
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
            wire.write_parts(sock_fd, parts, timeout_s)
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

    async def _send_in_thread(self, build: Callable[[], list[wire.Buffer]]) -> None:
        await self._writer.drain()  # write limits are 0: the buffer is now empty
        sock = self._writer.get_extra_info("socket")
        sock_fd = os.dup(sock.fileno())  # stays valid if the transport closes
        timeout_s = self.config.io_timeout_s
        try:
            await asyncio.to_thread(_build_and_send, build, sock_fd, timeout_s)
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
                frame = await wire.read_frame(self._reader, self.config.max_frame_bytes)
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


class NodeServer:
    """Serves a :class:`ReplicaStore` over TCP to authenticated clients.

    ``port`` is the bound port once :meth:`start` returned (pass 0 to let the
    OS choose). Lifecycle: ``await start()``, then ``await serve_forever()`` or
    any other wait, then ``await close()``.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        node_id: str,
        config: NodeConfig,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.config = config
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ops: dict[str, Handler] = {}
        self._builtins = _BuiltinOps(store, node_id=node_id, config=config)
        for name, handler in self._builtins.handlers().items():
            self.register_op(name, handler)

    def register_op(
        self, name: str, handler: Handler, *, replace: bool = False
    ) -> None:
        """Serve requests with ``"op": name`` by ``handler`` (see module docs).

        Raises:
            ConfigError: ``name`` is taken and ``replace`` is False.
        """
        if name in self._ops and not replace:
            msg = f"op {name!r} is already registered; pass replace=True to override"
            raise ConfigError(msg)
        self._ops[name] = handler

    async def start(self) -> None:
        """Bind and start accepting connections; sets :attr:`port`."""
        await self._bind()

    async def _bind(self) -> asyncio.Server:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._handle, self.host, self.port, limit=self.config.chunk_bytes
            )
            self.port = self._server.sockets[0].getsockname()[1]
            logger.info(
                "node %s listening on %s:%s", self.node_id, self.host, self.port
            )
        return self._server

    async def serve_forever(self) -> None:
        """Serve (starting if needed) until cancelled or :meth:`close` is called."""
        server = await self._bind()
        try:
            await server.serve_forever()
        except asyncio.CancelledError:
            if server.is_serving():
                raise

    async def close(self) -> None:
        """Stop accepting, drop open connections and release the client pool."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._builtins.close()
        logger.info("node %s closed", self.node_id)

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        address = writer.get_extra_info("peername")
        peer = f"{address[0]}:{address[1]}" if address else "unknown"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # drain() then waits for an empty buffer, so _send_in_thread may write
        # on the socket directly once it has drained.
        writer.transport.set_write_buffer_limits(high=0)
        conn = Connection(
            reader, writer, peer=peer, node_id=self.node_id, config=self.config
        )
        try:
            if await self._handshake(conn, reader):
                await self._serve(conn, reader)
        except (ConnectionError, TimeoutError) as exc:
            logger.warning("connection from %s dropped: %r", peer, exc)
        except asyncio.CancelledError:
            # Only close() cancels these tasks; finishing normally keeps 3.11's
            # stream callback from logging the cancellation as an error.
            logger.info("connection from %s closed by node shutdown", peer)
            if sock is not None:  # also stops a send running in a worker thread
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError as exc:
                    logger.debug("shutdown of %s: %s", peer, exc)
        except Exception:
            logger.exception("internal error serving %s; connection closed", peer)
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _next_frame(
        self, conn: Connection, reader: asyncio.StreamReader, limit: int
    ) -> dict[str, Any] | None:
        """Read one frame; None at the end of the stream or on a framing error.

        A framing error is answered (``too_large`` or ``bad_frame``) and logged;
        the caller then closes the connection.
        """
        try:
            length = await wire.read_length(reader)
            if length is None:
                return None
            if length > limit:
                logger.warning("oversize frame from %s: %d bytes", conn.peer, length)
                await conn.error(
                    "too_large",
                    f"frame of {length} bytes exceeds node {self.node_id}'s bound of "
                    f"{limit}; raise sr3.node.max.frame.bytes or send less",
                )
                return None
            async with asyncio.timeout(self.config.io_timeout_s):
                body = await wire.read_body(reader, length)
            return wire.decode_body(body)
        except ProtocolError as exc:
            logger.warning("bad frame from %s: %s", conn.peer, exc)
            await conn.error("bad_frame", f"node {self.node_id}: {exc}")
            return None

    async def _handshake(self, conn: Connection, reader: asyncio.StreamReader) -> bool:
        nonce = secrets.token_bytes(wire.NONCE_BYTES)
        await conn.send({"op": "hello", "nonce": nonce, "node_id": self.node_id})
        async with asyncio.timeout(self.config.io_timeout_s):
            frame = await self._next_frame(conn, reader, wire.HANDSHAKE_MAX_FRAME_BYTES)
        if frame is None:
            return False
        if (
            frame.get("op") != "auth"
            or frame.get("v") != wire.PROTOCOL_VERSION
            or not wire.check_mac(self.config.secret, nonce, frame.get("mac"))
        ):
            logger.warning("authentication of %s failed", conn.peer)
            await conn.error(
                "auth",
                f"node {self.node_id} rejected the HMAC answer: give clients and "
                f"nodes the same sr3.node.secret (protocol v{wire.PROTOCOL_VERSION})",
            )
            return False
        await conn.ok({"node_id": self.node_id})
        return True

    async def _serve(self, conn: Connection, reader: asyncio.StreamReader) -> None:
        while True:
            request = await self._next_frame(conn, reader, self.config.max_frame_bytes)
            if request is None or not await self._dispatch(conn, request):
                return

    async def _dispatch(self, conn: Connection, request: dict[str, Any]) -> bool:
        """Run one request's handler; False when the connection must close."""
        op = request.get("op")
        handler = self._ops.get(op) if isinstance(op, str) else None
        if request.get("v") != wire.PROTOCOL_VERSION:
            text = (
                f"request v{request.get('v')!r}; node speaks v{wire.PROTOCOL_VERSION}"
            )
            logger.warning("bad request from %s: %s", conn.peer, text)
            await conn.error("bad_request", text)
            return True
        if handler is None:
            name = op if isinstance(op, str) else type(op).__name__
            logger.warning("unknown op %.100r from %s", name, conn.peer)
            known = ", ".join(sorted(self._ops))
            await conn.error("unknown_op", f"unknown op {name[:100]!r}; known: {known}")
            return True
        try:
            await handler(conn, request)
        except ProtocolError as exc:
            logger.warning("bad %s request from %s: %s", op, conn.peer, exc)
            await conn.error("bad_request", str(exc))
        except ShardNotFoundError as exc:
            logger.info("%s from %s: %s", op, conn.peer, exc)
            await conn.error("not_found", str(exc))
        except ChecksumError as exc:
            logger.warning("%s from %s: %s", op, conn.peer, exc)
            await conn.error("corrupt", str(exc))
        except SR3Error as exc:
            logger.warning("%s from %s failed: %s", op, conn.peer, exc)
            await conn.error("internal", f"{op} failed on node {self.node_id}: {exc}")
        except ConnectionError:
            raise
        except Exception as exc:
            logger.exception("%s from %s: unexpected error; closing", op, conn.peer)
            text = f"{op} hit an unexpected error on node {self.node_id}: {exc!r}"
            await conn.error("internal", text + "; see the node's log")
            return False
        return not conn.closing


class _BuiltinOps:
    """The replica ops every node serves; blocking work runs in threads."""

    def __init__(self, store: ReplicaStore, *, node_id: str, config: NodeConfig):
        self.store = store
        self.node_id = node_id
        self.config = config
        self.pool = ClientPool(config)  # node-to-node copies (pull)

    def handlers(self) -> dict[str, Handler]:
        return {
            "put": self.put,
            "get": self.get,
            "stream": self.stream,
            "has": self.has,
            "delete": self.delete,
            "list": self.list_replicas,
            "stats": self.stats,
            "ping": self.ping,
            "pull": self.pull,
            "verify": self.verify,
        }

    def close(self) -> None:
        self.pool.close_all()

    async def put(self, conn: Connection, request: dict[str, Any]) -> None:
        shard, crc = require_shard(request), _require_crc(request)
        data = require(request, "data", bytes)
        stored = await asyncio.to_thread(self.store.put, shard, data, crc)
        await conn.ok({"stored": stored})

    async def get(self, conn: Connection, request: dict[str, Any]) -> None:
        shard = require_shard(request)

        def produce() -> tuple[dict[str, Any], bytes]:
            # The node does not checksum what it serves: the client checks the
            # payload end to end against the header's crc32 (one pass, not two).
            info, data = self.store.read(shard, verify=False)
            return {"size": info.size, "crc": info.crc32}, data

        await conn.ok_from_thread(produce)

    async def stream(self, conn: Connection, request: dict[str, Any]) -> None:
        shard = require_shard(request)
        chunk_bytes = self.config.chunk_bytes
        if "chunk_bytes" in request:
            chunk_bytes = require(request, "chunk_bytes", int)
        largest = self.config.max_frame_bytes - wire.HANDSHAKE_MAX_FRAME_BYTES
        if not 1 <= chunk_bytes <= largest:
            msg = f"stream of shard {shard!r}: chunk_bytes must be 1..{largest}"
            raise ProtocolError(msg)
        reader = await asyncio.to_thread(self.store.open_reader, shard)
        head: dict[str, Any] = {"size": reader.info.size, "crc": reader.info.crc32}

        def next_chunk() -> tuple[dict[str, Any], bytes]:
            # Raises ChecksumError before the last chunk goes out if it is corrupt.
            chunk = reader.read(chunk_bytes)
            return {**head, "last": reader.done}, chunk

        try:
            while not reader.done:
                await conn.ok_from_thread(next_chunk, blob_key="chunk")
                head = {}
        finally:
            reader.close()

    async def has(self, conn: Connection, request: dict[str, Any]) -> None:
        info = self.store.has(require_shard(request))
        if info is None:
            await conn.ok({"found": False})
        else:
            await conn.ok({"found": True, "size": info.size, "crc": info.crc32})

    async def delete(self, conn: Connection, request: dict[str, Any]) -> None:
        deleted = await asyncio.to_thread(self.store.delete, require_shard(request))
        await conn.ok({"deleted": deleted})

    async def list_replicas(self, conn: Connection, request: dict[str, Any]) -> None:
        prefix = require(request, "prefix", str) if "prefix" in request else ""
        rows = [[i.shard_id, i.size, i.crc32] for i in self.store.list(prefix)]
        await conn.ok({"replicas": rows})

    async def stats(self, conn: Connection, request: dict[str, Any]) -> None:
        shards, size = len(self.store), self.store.total_bytes()
        await conn.ok({"node_id": self.node_id, "shards": shards, "bytes": size})

    async def ping(self, conn: Connection, request: dict[str, Any]) -> None:
        await conn.ok({"node_id": self.node_id})

    async def verify(self, conn: Connection, request: dict[str, Any]) -> None:
        valid = await asyncio.to_thread(self.store.verify, require_shard(request))
        await conn.ok({"valid": valid})

    async def pull(self, conn: Connection, request: dict[str, Any]) -> None:
        shard, crc = require_shard(request), _require_crc(request)
        source = require(request, "source", dict)
        host, port = require(source, "host", str), require(source, "port", int)
        current = self.store.has(shard)
        if current is not None and current.crc32 == crc:
            if await asyncio.to_thread(self.store.verify, shard):
                await conn.ok({"stored": False})
                return
        data = await asyncio.to_thread(self._fetch, shard, host, port)
        if zlib.crc32(data) != crc:
            msg = (
                f"pull of shard {shard!r}: source {host}:{port} holds a version with "
                f"another crc32 than {crc:#010x}; pull from a holder of that version"
            )
            raise ChecksumError(msg)
        stored = await asyncio.to_thread(self.store.put, shard, data, crc)
        await conn.ok({"stored": stored})

    def _fetch(self, shard: str, host: str, port: int) -> bytes:
        try:
            with self.pool.client((host, port)) as client:
                return client.get(shard)
        except (ShardNotFoundError, ChecksumError):
            raise
        except StorageError as exc:  # unreachable source, auth, protocol
            msg = f"pull of shard {shard!r} from {host}:{port} failed: {exc}"
            raise StorageError(msg) from exc


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sr3.server",
        description="Run a standalone ring node (no ZooKeeper); SR3_NODE_* "
        "environment variables set the node config.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--secret-file", type=Path, help="file holding the secret")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def _run(server: NodeServer) -> None:
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server.port}", flush=True)  # parents wait for this line
    try:
        await stop.wait()
    finally:
        logger.info("node %s stopping", server.node_id)
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a standalone node until SIGTERM/SIGINT; return the exit status."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = Sr3Config.from_env().node
        if args.secret_file is not None:
            secret = args.secret_file.read_text(encoding="utf-8").strip()
            config = replace(config, secret=secret)
        store = ReplicaStore(args.data_dir)
    except (SR3Error, OSError) as exc:
        logger.error("node %s cannot start: %s", args.node_id, exc)
        return 1
    server = NodeServer(
        store, node_id=args.node_id, config=config, host=args.host, port=args.port
    )
    try:
        asyncio.run(_run(server))
    except OSError as exc:
        logger.error("node %s failed: %s", args.node_id, exc)
        return 1
    return 0


if __name__ == "__main__":
    # Re-import so loggers and classes carry their real module name, not __main__.
    from sr3.server import main as _main

    raise SystemExit(_main())
