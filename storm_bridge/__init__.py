"""streamparse/pystorm integration: stateful bolts, replayable spouts, local cluster."""

from storm_bridge.components import ReplayableSpout, StatefulBolt, StateKeyError

__all__ = ["ReplayableSpout", "StateKeyError", "StatefulBolt"]
