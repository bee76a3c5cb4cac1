"""What a Spark Python worker knows: the topology it hosts, and the running task.

A worker loads the topology file once (per path, environment and parallelism)
and keeps it for every Spark task it runs; :func:`spark_task` names the running task.
"""

from __future__ import annotations

import functools

from pyspark import TaskContext

from spark_bridge.rows import ComponentRef
from topology_api.topology import LoadedTopology, load_topology

__all__ = ["loaded_topology", "spark_task", "topology_of"]


def spark_task() -> tuple[int, str]:
    """Return (Spark partition id, micro-batch id) of the running Spark task."""
    context = TaskContext.get()
    if context is None:
        return 0, "?"
    batch = context.getLocalProperty("streaming.sql.batchId") or "?"
    return context.partitionId(), batch


@functools.cache
def loaded_topology(
    path: str,
    environment: str | None = None,
    parallelism: tuple[tuple[str, int], ...] = (),
) -> LoadedTopology:
    """Return the topology file at ``path``, loaded once per Python worker.

    ``environment`` picks per-environment parallelism (``par={"prod": 4}``),
    ``parallelism`` replaces task counts (a rebalanced run's); a worker that
    ran the topology otherwise loads it again.
    """
    return load_topology(path, environment=environment, parallelism=dict(parallelism))


def topology_of(ref: ComponentRef) -> LoadedTopology:
    """Return the topology ``ref`` names, in its environment (see above)."""
    return loaded_topology(ref.topology_path, ref.environment, ref.parallelism)
