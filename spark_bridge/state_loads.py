"""What Spark's own state store reloaded during a run, read from the query's progress.

A lost executor's tasks run again elsewhere; each stateful partition that moves
loads its state store there from the Spark checkpoint's files (the ring is read
only when a query starts on an empty checkpoint, :mod:`spark_bridge.restore`).
Spark's HDFS-backed provider counts those loads per partition:
``loadedMapCacheMissCount`` in each stateful operator's ``customMetrics`` (a load
that found no version in the executor's memory). The counters are cumulative per
partition's provider and a provider that starts on a new executor starts at
zero, so a batch's sum over partitions is how many partition loads from files
the providers alive in that batch have done: it rises by the partitions that
moved (an executor lost, a task rescheduled), never by the ones that stayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["state_store_loads"]

#: The HDFS-backed provider's count of loads that read the checkpoint's files.
MISSES: Final = "loadedMapCacheMissCount"


def state_store_loads(progress: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Return the run's state store reloads, or None when no operator keeps state.

    Returns:
        ``partitions``: the stateful partitions of the last batch (all operators);
        ``reloaded_partitions``: the most partition loads from files seen in a
        batch; ``batches``: ``[batch id, loads]`` each time the count changed.
    """
    partitions = 0
    most = 0
    changes: list[list[int]] = []
    seen = False
    for entry in progress:
        operators = [o for o in entry.get("stateOperators") or () if o]
        if not operators:
            continue
        seen = True
        partitions = sum(int(o.get("numStateStoreInstances") or 0) for o in operators)
        loads = sum(
            int((o.get("customMetrics") or {}).get(MISSES) or 0) for o in operators
        )
        if not changes or changes[-1][1] != loads:
            changes.append([int(entry.get("batchId", -1)), loads])
        most = max(most, loads)
    if not seen:
        return None
    return {"partitions": partitions, "reloaded_partitions": most, "batches": changes}
