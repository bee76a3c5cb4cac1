"""The recovery ops a ring node serves: line and tree relays and the planner's probe.

``zk/node.py`` installs them on the node's :class:`~sr3.server.NodeServer`::

    RelayOps(server.store, faults=RelayFaults.parse(env)).install(server)

* ``relay_line``: see :mod:`sr3.recovery.line`;
* ``relay_tree``: see :mod:`sr3.recovery.tree`;
* ``relay_probe``: replies with ``bytes`` zero bytes (at most 4 MiB), so R can time
  a small read from each holder before choosing a structure.
"""

from __future__ import annotations

from typing import Any

from sr3.errors import ProtocolError
from sr3.recovery.frames import RelayFaults
from sr3.recovery.line import serve_line
from sr3.recovery.tree_node import serve_tree
from sr3.server import Connection, NodeServer, require
from sr3.storage import ReplicaStore

__all__ = ["MAX_PROBE_BYTES", "PROBE_OP", "RelayOps"]

PROBE_OP = "relay_probe"
MAX_PROBE_BYTES = 4 * 1024 * 1024


class RelayOps:
    """Line, tree and probe ops of one ring node.

    Args:
        store: The node's replicas.
        faults: Test-only fault injection (default: none).
    """

    def __init__(self, store: ReplicaStore, *, faults: RelayFaults | None = None):
        self.store = store
        self.faults = faults or RelayFaults()
        self._zeros = bytes(MAX_PROBE_BYTES)

    def install(self, server: NodeServer) -> None:
        """Register the ops on ``server`` (before it starts)."""
        server.register_op("relay_line", self.line)
        server.register_op("relay_tree", self.tree)
        server.register_op(PROBE_OP, self.probe)

    async def line(self, conn: Connection, request: dict[str, Any]) -> None:
        """Serve ``relay_line``."""
        await serve_line(conn, request, store=self.store, faults=self.faults)

    async def tree(self, conn: Connection, request: dict[str, Any]) -> None:
        """Serve ``relay_tree``."""
        await serve_tree(conn, request, store=self.store, faults=self.faults)

    async def probe(self, conn: Connection, request: dict[str, Any]) -> None:
        """Serve ``relay_probe``: ``bytes`` zero bytes under ``data``.

        Raises:
            ProtocolError: ``bytes`` is not in 0..4 MiB.
        """
        size = require(request, "bytes", int)
        if not 0 <= size <= MAX_PROBE_BYTES:
            msg = f"{PROBE_OP}: bytes={size}; ask for 0..{MAX_PROBE_BYTES}"
            raise ProtocolError(msg)
        await conn.ok({"t": "end", "last": True}, blob=memoryview(self._zeros)[:size])
