"""Real Apache Storm 2.x from Maven Central: its STORM_HOME, launcher, daemons, Nimbus.

``scripts/fetch-jars.sh`` fetches the jars; :class:`StormHome` finds them;
:mod:`~storm_bridge.apache.launcher` builds java command lines in place of
Storm's ``bin/storm``; :class:`ApacheStormCluster` runs Nimbus and supervisors
(``sr3 lab up --storm``); :class:`NimbusClient` asks Nimbus over Thrift.
"""

from storm_bridge.apache.daemons import (
    DEFAULT_NIMBUS_PORT,
    ApacheStormCluster,
    StormClusterError,
)
from storm_bridge.apache.home import (
    StormHome,
    StormMissingError,
    java_binary,
    pinned_version,
)
from storm_bridge.apache.launcher import daemon_command, jar_command, storm_options
from storm_bridge.apache.nimbus import (
    ClusterSummary,
    NimbusClient,
    NimbusUnreachableError,
    SupervisorStatus,
    TopologyStatus,
)
from storm_bridge.apache.state import DaemonHost, StormClusterInfo, SupervisorInfo

__all__ = [
    "DEFAULT_NIMBUS_PORT",
    "ApacheStormCluster",
    "DaemonHost",
    "ClusterSummary",
    "NimbusClient",
    "NimbusUnreachableError",
    "StormClusterError",
    "StormClusterInfo",
    "StormHome",
    "StormMissingError",
    "SupervisorInfo",
    "SupervisorStatus",
    "TopologyStatus",
    "daemon_command",
    "jar_command",
    "java_binary",
    "pinned_version",
    "storm_options",
]
