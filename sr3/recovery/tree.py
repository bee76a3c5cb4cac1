"""Tree-structured recovery: holders in a k-ary tree merge deltas on the way to R.

R picks few live holders that together hold every shard (a greedy set cover,
:func:`~sr3.recovery.base.assign_covering`: fewer nodes make a shallower tree),
gives each shard to the least-loaded of them, lays them out in ring order as a
k-ary heap (node ``i``'s children are ``k*i+1 .. k*i+k``, with
``k = sr3.recovery.tree.fanout``) and sends ``relay_tree`` to the root, node 0.
Each node asks its children for their subtrees and reads its own shards.

Every node emits pieces in ascending key-group order. A node therefore merges as
the streams arrive: once every source (its own shards and each child) has moved
past key group ``g``, all pieces of ``g`` are in, and it folds the runs of
adjacent epochs (base plus deltas become one FULL blob; overwritten and deleted
entries are dropped), then forwards them up. Pieces carry their epoch range, and
only runs of consecutive epochs of the key group's chain are folded, so deltas
are never applied out of order. The root streams the merged result to R.

A child that fails mid-stream is re-planned around: its parent discards the
child's pieces of the key group in progress, reports it ``lost`` and adopts the
child's own children, asking them to resume from that key group. Only the failed
node's own shards stay missing; R fetches them afterwards.

The nodes' side is :mod:`sr3.recovery.tree_node`. A child's piece that has
nothing to merge with is forwarded exactly as it
arrived, unchecked: R checks every piece against its crc32 on arrival, and a node
checks the pieces it merges before folding them.
"""

from __future__ import annotations

import logging
from typing import Any

from sr3.buffers import fresh_buffer
from sr3.checksum import crc32
from sr3.errors import ProtocolError
from sr3.recovery.base import RecoveryStrategy, TransferJob
from sr3.recovery.chains import read_relay, relay_nodes
from sr3.recovery.pieces import Piece
from sr3.recovery.transport import RelayStream

__all__ = ["OP", "TreeRecovery", "check_piece", "children_of", "piece_of"]

logger = logging.getLogger(__name__)

OP = "relay_tree"


def children_of(index: int, fanout: int, count: int) -> list[int]:
    """Return the tree indices of node ``index``'s children in a k-ary heap."""
    first = fanout * index + 1
    return list(range(first, min(first + fanout, count)))


def piece_of(fields: dict[str, Any], blob: object, where: str) -> tuple[Piece, int]:
    """Return a piece frame's piece and the crc32 it claims (not checked here)."""
    kg, lo, hi, crc = (
        fields.get("kg"),
        fields.get("lo"),
        fields.get("hi"),
        fields.get("crc"),
    )
    if not (
        isinstance(kg, int)
        and isinstance(lo, int)
        and isinstance(hi, int)
        and isinstance(blob, bytes | memoryview)
        and isinstance(crc, int)
    ):
        msg = f"{where}: malformed piece frame"
        raise ProtocolError(msg)
    return Piece(kg, lo, hi, blob), crc


def check_piece(piece: Piece, crc: int, where: str) -> None:
    """Check a piece against its crc32.

    Raises:
        ProtocolError: it fails.
    """
    if crc32(piece.blob) != crc:
        msg = (
            f"{where}: piece of key group {piece.kg} epochs {piece.lo}..{piece.hi} "
            "fails its crc32"
        )
        raise ProtocolError(msg)


class TreeRecovery(RecoveryStrategy):
    """A k-ary tree of holders merging on the way to R (see module docs)."""

    name = "tree"

    def transfer(self, job: TransferJob) -> None:
        """Receive the job's shards, merged, from the root of a holder tree."""
        nodes = relay_nodes(job, self.name)
        if not nodes:
            return
        order = [n.node_id for n in nodes]
        fanout = self.context.recovery.tree_fanout
        edges = [[order[i], order[(i - 1) // fanout]] for i in range(1, len(order))]
        job.structure = {
            "nodes": order,
            "edges": [*edges, [order[0], "R"]],
            "fanout": fanout,
            "assignment": {n.node_id: list(n.shards) for n in nodes},
        }
        job.emit("plan", mechanism=self.name, structure=job.structure)
        request = {
            "op": OP,
            "owner": job.owner,
            "nodes": [n.to_wire() for n in nodes],
            "index": 0,
            "fanout": fanout,
            "from_kg": 0,
            "chains": job.assembly.chains.to_wire(),
        }
        root = nodes[0]
        where = f"tree root {root.node_id}"

        def on_piece(stream: RelayStream, head: dict[str, Any], size: int) -> None:
            blob: object = head.get("data")
            if blob is None:
                blob = fresh_buffer(size)  # R keeps it: the piece's blob
                stream.recv_blob_into(blob)
            piece, crc = piece_of(head, blob, where)
            check_piece(piece, crc, where)
            job.assembly.add_piece(piece)
            job.delivered(root.node_id, len(piece.blob))

        read_relay(
            job,
            self.name,
            root,
            request,
            {"piece": on_piece},
            config=self.context.node_config,
        )
