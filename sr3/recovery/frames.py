"""Node-side pieces of relay streams: request parsing, fault knobs, the frame sender.

See :mod:`sr3.recovery.transport` for the frame types of ``relay_line`` and
``relay_tree`` replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sr3 import wire
from sr3.errors import ConfigError, ProtocolError
from sr3.server import Connection, require

__all__ = ["FrameSender", "RelayFaults", "RelayNode", "parse_nodes", "shard_list"]


@dataclass(frozen=True)
class RelayNode:
    """A node of a relay structure and the shards it sends itself.

    Attributes:
        node_id: The node's id.
        host: Its address.
        port: Its port.
        shards: Shard ids it sends from its own replicas.
    """

    node_id: str
    host: str
    port: int
    shards: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """Return the request form."""
        return {
            "id": self.node_id,
            "host": self.host,
            "port": self.port,
            "shards": list(self.shards),
        }


def parse_nodes(request: Mapping[str, Any], name: str) -> list[RelayNode]:
    """Return the relay nodes listed under ``request[name]``.

    Raises:
        ProtocolError: the list is missing or malformed.
    """
    rows = require(request, name, list)
    nodes = []
    for row in rows:
        if not isinstance(row, dict):
            msg = f"op {request.get('op')!r}: {name} holds a non-map entry"
            raise ProtocolError(msg)
        shards = require(row, "shards", list)
        if not all(isinstance(s, str) for s in shards):
            msg = f"op {request.get('op')!r}: shard ids must be strings"
            raise ProtocolError(msg)
        nodes.append(
            RelayNode(
                require(row, "id", str),
                require(row, "host", str),
                require(row, "port", int),
                tuple(shards),
            )
        )
    return nodes


@dataclass(frozen=True)
class RelayFaults:
    """Test-only fault injection for relay ops (off by default).

    Read from ``SR3_TEST_RELAY_FAULTS`` by the node entry point, as
    ``delay_s=0.01,abort_after_frames=20``.

    Attributes:
        delay_s: Sleep before each frame a node sends, so tests can act while a
            recovery is surely mid-transfer.
        abort_after_frames: Fail a relay with an error frame after this many
            frames, as a node crashing mid-stream would.
    """

    delay_s: float = 0.0
    abort_after_frames: int | None = None

    @classmethod
    def parse(cls, text: str) -> RelayFaults:
        """Parse ``key=value`` pairs separated by commas (empty: no faults).

        Raises:
            ConfigError: an unknown key or a malformed value.
        """
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, _, raw = item.partition("=")
            try:
                if key == "delay_s":
                    values[key] = float(raw)
                elif key == "abort_after_frames":
                    values[key] = int(raw)
                else:
                    msg = f"unknown relay fault {key!r}"
                    raise ConfigError(msg)
            except ValueError as exc:
                msg = f"relay fault {item!r} has a malformed value"
                raise ConfigError(msg) from exc
        return cls(**values)


class FrameSender:
    """Sends a relay's frames to its downstream peer, one frame at a time.

    Several tasks (own shards, forwarded upstream frames) share the connection;
    a lock keeps frames whole, and each send waits until the peer drained it.

    Args:
        conn: The downstream connection.
        faults: Test-only fault injection.
    """

    def __init__(self, conn: Connection, faults: RelayFaults) -> None:
        self._conn = conn
        self._faults = faults
        self._lock = asyncio.Lock()
        self.frames = 0
        self.bytes = 0

    async def send(
        self, fields: Mapping[str, Any], *, blob: wire.Buffer | None = None
    ) -> None:
        """Send one ``ok`` frame with ``blob`` under ``data``.

        Raises:
            ConnectionError: the downstream peer went away, or the injected abort
                fired (the stream breaks as if this node crashed).
        """
        size = 0 if blob is None else memoryview(blob).nbytes
        await self._send(self._conn.ok(fields, blob=blob), size)

    async def send_encoded(self, frame: wire.Buffer, *, blob_bytes: int = 0) -> None:
        """Forward one frame exactly as it arrived (length prefix included).

        ``blob_bytes`` is only counted in :attr:`bytes`.

        Raises:
            ConnectionError: as :meth:`send`.
        """
        await self._send(self._conn.send_encoded([frame]), blob_bytes)

    async def send_file(
        self, fields: Mapping[str, Any], fd: int, offset: int, count: int
    ) -> None:
        """Send one ``ok`` frame whose blob is ``count`` bytes of file ``fd``.

        The bytes go by ``os.sendfile`` unchecked: the receiver verifies them.

        Raises:
            ConnectionError: as :meth:`send`.
        """
        await self._send(self._conn.ok_file_range(fields, fd, offset, count), count)

    async def _send(self, sending: Coroutine[Any, Any, None], size: int) -> None:
        """Await ``sending`` under the lock, after the injected faults."""
        try:
            if self._faults.delay_s:
                await asyncio.sleep(self._faults.delay_s)
            async with self._lock:
                limit = self._faults.abort_after_frames
                if limit is not None and self.frames >= limit:
                    msg = f"fault injection: relay aborted after {limit} frames"
                    raise ConnectionAbortedError(msg)
                if self._conn.closing:
                    msg = f"downstream {self._conn.peer} closed the relay"
                    raise ConnectionResetError(msg)
                await sending
                self.frames += 1
                self.bytes += size
        finally:
            sending.close()  # never started when a check above raised


def shard_list(values: Sequence[object], what: str) -> list[str]:
    """Return ``values`` as shard ids.

    Raises:
        ProtocolError: a value is not a string.
    """
    if not all(isinstance(v, str) for v in values):
        msg = f"{what} must list shard ids (strings)"
        raise ProtocolError(msg)
    return [str(v) for v in values]
