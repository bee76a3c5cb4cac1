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
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sr3 import frame_io, wire
from sr3.config import NodeConfig, Sr3Config
from sr3.connection import Connection, Handler, require, require_shard
from sr3.errors import (
    ChecksumError,
    ConfigError,
    ProtocolError,
    ShardNotFoundError,
    SR3Error,
)
from sr3.node_ops import BuiltinOps, PullSources
from sr3.storage import ReplicaStore

__all__ = [
    "Connection",
    "Handler",
    "NodeServer",
    "announce_ready",
    "main",
    "require",
    "require_shard",
]

logger = logging.getLogger(__name__)


class NodeServer:
    """Serves a :class:`ReplicaStore` over TCP to authenticated clients.

    ``port`` is the bound port once :meth:`start` returned (pass 0 to let the
    OS choose). Lifecycle: ``await start()``, then ``await serve_forever()`` or
    any other wait, then ``await close()``. ``pull_sources`` says which
    addresses the ``pull`` op may copy from (the ring's members); without it
    every pull is refused.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        node_id: str,
        config: NodeConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        pull_sources: PullSources | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.config = config
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ops: dict[str, Handler] = {}
        self._builtins = BuiltinOps(
            store, node_id=node_id, config=config, pull_sources=pull_sources
        )
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
            length = await frame_io.read_length(reader)
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
                body = await frame_io.read_body(reader, length)
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
        version = frame.get("v")
        if frame.get("op") == "auth" and version != wire.PROTOCOL_VERSION:
            shown = version if isinstance(version, int) else type(version).__name__
            logger.warning(
                "%s speaks protocol v%.20s, not v%s",
                conn.peer,
                shown,
                wire.PROTOCOL_VERSION,
            )
            await conn.error(
                "auth",
                f"node {self.node_id} speaks protocol v{wire.PROTOCOL_VERSION}, this "
                f"client v{str(shown)[:20]}: run the same sr3 version on clients and "
                "nodes",
            )
            return False
        if frame.get("op") != "auth" or not wire.check_mac(
            self.config.secret, nonce, frame.get("mac")
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
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        type=_address,
        metavar="HOST:PORT",
        help="a node `pull` may copy from (repeat it; default: none)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 2**16:
        msg = f"{text!r} is not HOST:PORT (a port in 1..65535)"
        raise argparse.ArgumentTypeError(msg)
    return host, int(port)


def announce_ready(line: str) -> None:
    """Print ``line`` on stdout for the process that started this node.

    That process reads stdout up to this line, then closes it; if it went away
    first (an interrupted ``sr3 lab up``, or one that failed on another node),
    the node keeps serving: it is registered and the lab records it. Its stdout
    then goes to /dev/null, so a later write cannot kill it either.
    """
    try:
        print(line, flush=True)
    except OSError as exc:  # BrokenPipeError, or a closed stdout
        logger.warning(
            "nobody reads this node's stdout (%s); serving all the same", exc
        )
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


async def _run(server: NodeServer) -> None:
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    announce_ready(f"READY {server.port}")  # parents wait for this line
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
    peers = frozenset(args.peer)

    def is_peer(host: str, port: int) -> bool:
        return (host, port) in peers

    server = NodeServer(
        store,
        node_id=args.node_id,
        config=config,
        host=args.host,
        port=args.port,
        pull_sources=is_peer if peers else None,
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
