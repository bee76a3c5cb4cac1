"""A local multilang cluster playing Storm's ShellBolt/ShellSpout side."""

from storm_bridge.cluster.events import ClusterEvent, ComponentCounters, EventKind
from storm_bridge.cluster.local import ClusterState, LocalCluster
from storm_bridge.cluster.settings import ClusterOptions

__all__ = [
    "ClusterEvent",
    "ClusterState",
    "ComponentCounters",
    "ClusterOptions",
    "EventKind",
    "LocalCluster",
]
