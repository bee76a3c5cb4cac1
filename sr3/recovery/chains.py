"""R's side of the relayed structures (line and tree): whom to ask, and the stream.

Both pick the few live holders that together hold every shard, in ring order
(:func:`relay_nodes`), send one request to a single node of them and read one
stream of frames back (:func:`read_relay`): data frames for the structure to
handle, ``lost`` frames naming a failed node or unreadable shard, and an ``end``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sr3.config import NodeConfig
from sr3.errors import StorageError
from sr3.recovery.base import TransferJob, assign_covering, ring_order
from sr3.recovery.frames import RelayNode
from sr3.recovery.transport import RelayStream

__all__ = ["read_relay", "relay_nodes"]

logger = logging.getLogger(__name__)

#: Handles one data frame: the stream (to receive its blob), its head and size.
FrameHandler = Callable[[RelayStream, dict[str, Any], int], None]


def relay_nodes(job: TransferJob, structure: str) -> list[RelayNode]:
    """The covering holders of the job's shards in ring order, each with its shards.

    Empty when no shard has a live holder; shards without one are logged and stay
    missing in ``job.assembly``.
    """
    usable = job.usable()
    assigned, orphans = assign_covering(job.shards, usable)
    for shard in orphans:
        logger.warning(
            "%s: shard %s has no live holder left", structure, shard.shard_id
        )
    return [
        RelayNode(
            n,
            usable[n].host,
            usable[n].port,
            tuple(s.shard_id for s in assigned[n]),
        )
        for n in ring_order(list(assigned))
    ]


def read_relay(
    job: TransferJob,
    structure: str,
    first: RelayNode,
    request: Mapping[str, Any],
    handlers: Mapping[str, FrameHandler],
    *,
    config: NodeConfig,
) -> None:
    """Send ``request`` to ``first`` and read its stream to the ``end`` frame.

    Frames whose ``t`` is in ``handlers`` go to their handler; ``lost`` frames to
    ``job.lost_frame``. A failure of ``first`` itself is recorded in ``job``
    (the round's re-plan fetches what is still missing).
    """
    try:
        with RelayStream(
            first.host, first.port, dict(request), config=config
        ) as stream:
            while True:
                head, size = stream.next_head()
                kind = head.get("t")
                handler = handlers.get(str(kind))
                if handler is not None:
                    handler(stream, head, size)
                elif kind == "lost":
                    job.lost_frame(head)
                elif kind == "end":
                    break
    except StorageError as exc:
        logger.warning("%s: %s failed: %s", structure, first.node_id, exc)
        job.lost(first.node_id, str(exc))
