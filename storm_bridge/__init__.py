"""streamparse/pystorm integration: stateful bolts, replayable spouts, local cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storm_bridge.components import ReplayableSpout, StatefulBolt, StateKeyError
from topology_api.partial_key import partial_key_grouping

if TYPE_CHECKING:
    from storm_bridge.kafka import KafkaSink, KafkaSpout

__all__ = [
    "KafkaSink",
    "KafkaSpout",
    "ReplayableSpout",
    "StateKeyError",
    "StatefulBolt",
    "partial_key_grouping",
]

#: Exports imported on first use: confluent-kafka loads only in tasks that use Kafka.
_LAZY = {"KafkaSink": "storm_bridge.kafka", "KafkaSpout": "storm_bridge.kafka"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'storm_bridge' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib  # noqa: PLC0415 (lazy export)

    return getattr(importlib.import_module(module), name)
