"""streamparse/pystorm integration: stateful bolts, replayable spouts, local cluster.

The names below load their module on first use (PEP 562): a topology file's
``from storm_bridge import StatefulBolt`` loads the components, while a command
that needs only :mod:`storm_bridge.wiring` (``sr3 state dump``) loads neither
them nor streamparse, and confluent-kafka loads only in tasks that use Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sr3.exports import lazy_exports

if TYPE_CHECKING:
    from storm_bridge.components import ReplayableSpout, StatefulBolt, StateKeyError
    from storm_bridge.kafka import KafkaSink, KafkaSpout
    from topology_api.partial_key import partial_key_grouping

__all__ = [
    "KafkaSink",
    "KafkaSpout",
    "ReplayableSpout",
    "StateKeyError",
    "StatefulBolt",
    "partial_key_grouping",
]

#: Each export's module, imported when the name is first read.
_EXPORTS = {
    "KafkaSink": "storm_bridge.kafka",
    "KafkaSpout": "storm_bridge.kafka",
    "ReplayableSpout": "storm_bridge.components",
    "StateKeyError": "storm_bridge.components",
    "StatefulBolt": "storm_bridge.components",
    "partial_key_grouping": "topology_api.partial_key",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
