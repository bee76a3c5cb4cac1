"""The state store reloads a Spark run reports, from the query's progress entries."""

from __future__ import annotations

from typing import Any

from spark_bridge.state_loads import state_store_loads


def _batch(batch: int, *misses: int) -> dict[str, Any]:
    return {
        "batchId": batch,
        "stateOperators": [
            {
                "numStateStoreInstances": 4,
                "customMetrics": {
                    "loadedMapCacheMissCount": m,
                    "loadedMapCacheHitCount": 9,
                },
            }
            for m in misses
        ],
    }


def test_reloads_rise_by_the_partitions_that_moved_and_are_reported_once() -> None:
    progress = [_batch(0, 0), _batch(1, 0), _batch(2, 2), _batch(3, 2)]
    assert state_store_loads(progress) == {
        "partitions": 4,
        "reloaded_partitions": 2,
        "batches": [[0, 0], [2, 2]],
    }


def test_every_stateful_operator_counts_and_a_stateless_query_has_none() -> None:
    two = state_store_loads([_batch(0, 1, 3)])
    assert two == {"partitions": 8, "reloaded_partitions": 4, "batches": [[0, 4]]}
    assert state_store_loads([{"batchId": 0, "stateOperators": []}]) is None
    assert state_store_loads([]) is None
