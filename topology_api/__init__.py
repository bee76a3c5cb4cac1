"""The engine-neutral topology API both engines build on.

``storm_bridge`` (the Storm engine) and ``spark_bridge`` (the Spark engine) are
siblings above this package and never import each other. Here lives what both
need to run the same topology file: the loaded topology
(:mod:`topology_api.topology`), groupings and key routing
(:mod:`~topology_api.groupings`, :mod:`~topology_api.partial_key`), the
stateful-bolt and replayable-spout contract (:mod:`~topology_api.contract`),
internal stream names (:mod:`~topology_api.barriers`), Storm conf keys
(:mod:`~topology_api.stormconf`), sink outputs (:mod:`~topology_api.outputs`),
Kafka settings, delivery and writers (:mod:`topology_api.kafka`), the
topology errors (:mod:`~topology_api.errors`), and pystorm's run-loop steps
for an in-process host (:mod:`~topology_api.pystorm_steps`, by attribute). It
imports streamparse's DSL (a topology file is written against it on both
engines), never pystorm's run loop nor either engine.
"""
