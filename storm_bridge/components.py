"""Stateful bolts and replayable spouts: the public component API of storm_bridge.

A :class:`StatefulBolt` keeps Flink-like keyed state: while ``process`` runs,
``self.state`` is the dict-like state of the tuple's key. A
:class:`ReplayableSpout` emits with an offset and can ``seek`` back to one. With
both, the local cluster checkpoints the topology in global epochs with aligned
barriers and rolls it back to the last committed epoch after a failure, giving
exactly-once effect on state.

Barriers travel on the stream :data:`BARRIER_STREAM`, which both classes declare
in their spec, so Storm's context and Thrift definition stay valid.

With ``sr3.checkpoint.mode=native`` (a real Storm cluster), there are no barriers:
both classes run the ZooKeeper protocol of :mod:`storm_bridge.native` themselves.
"""

from __future__ import annotations

from storm_bridge.replayable import ReplayableSpout
from storm_bridge.stateful import StatefulBolt, StateKeyError
from topology_api.barriers import (
    BARRIER_COMMAND,
    BARRIER_FIELDS,
    BARRIER_STREAM,
    LOADED_METRIC,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
)

__all__ = [
    "BARRIER_COMMAND",
    "BARRIER_FIELDS",
    "BARRIER_STREAM",
    "LOADED_METRIC",
    "RESTORED_METRIC",
    "SNAPSHOT_METRIC",
    "ReplayableSpout",
    "StateKeyError",
    "StatefulBolt",
]
