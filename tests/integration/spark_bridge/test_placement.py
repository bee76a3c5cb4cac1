"""Which Storm task runs a tuple on Spark, and bolts that emit on tick tuples.

Storm sends a fields-grouped tuple to task ``floorMod(deepHashCode(key), par)``
and a globally grouped one to the lowest task; a bolt that reads its task index
from the context must see the same index on Spark. A streamparse
``BatchingBolt`` emits only when a tick tuple flushes its batches; on Spark the
end of every micro-batch is that flush.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_bridge import UnsupportedTopologyError, final_state, plan_topology
from sr3.codec import decode_value
from tests.integration.spark_bridge.test_dag import TOPOLOGIES, emits, run, sink_rows
from topology_api.java_hash import IntegerBoxing, fields_task_index
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

N = 12


def storm_task(k: int, tasks: int, boxing: IntegerBoxing = IntegerBoxing.LONG) -> int:
    """Return the task index Storm's fields grouping picks for key ``[k]``."""
    return fields_task_index([k], tasks, boxing)


def test_fields_and_global_groupings_run_on_the_task_storm_picks(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = run(spark, "sb_dag_tasks", tmp_path, rows=3, **{"dag.n": N})
    rows = sink_rows(checkpoint)

    by_key = {n: storm_task(n % 3, 3) for n in range(N)}
    assert sorted(map(tuple, emits(rows, "fields"))) == sorted(by_key.items())
    assert sorted(map(tuple, emits(rows, "keyed"))) == sorted(by_key.items())
    assert sorted(map(tuple, emits(rows, "glob"))) == [(n, 0) for n in range(N)]
    assert final_state(checkpoint, "keyed") == {
        json.dumps([k]): {"tasks": [storm_task(k, 3)]} for k in range(3)
    }


def test_negative_int_keys_run_where_storm_2_6_sends_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Storm 2.6 parses JSON ints as Integer (sr3.storm.json.integer.boxing):
    # key -1 then hashes to -1, not to Long's 0, and goes to another task
    boxing = IntegerBoxing.INTEGER
    conf = {"dag.n": N, "dag.key.shift": 2, "sr3.storm.json.integer.boxing": "integer"}
    checkpoint = run(spark, "sb_dag_tasks", tmp_path, rows=3, **conf)
    rows = sink_rows(checkpoint)

    by_key = {n: storm_task(n % 3 - 2, 3, boxing) for n in range(N)}
    assert by_key != {n: storm_task(n % 3 - 2, 3) for n in range(N)}
    assert sorted(map(tuple, emits(rows, "fields"))) == sorted(by_key.items())
    assert sorted(map(tuple, emits(rows, "keyed"))) == sorted(by_key.items())
    assert final_state(checkpoint, "keyed") == {
        json.dumps([k]): {"tasks": [storm_task(k, 3, boxing)]} for k in (-2, -1, 0)
    }


def test_a_batching_bolt_flushes_its_batches_every_micro_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    # three micro-batches: nothing may stay behind in a batch between them
    checkpoint = run(spark, "sb_dag_batching", tmp_path, rows=2, **{"dag.n": N})

    expected: dict[str, dict[str, int]] = defaultdict(lambda: {"size": 0, "sum": 0})
    for n in range(N):
        expected[json.dumps([n % 3])]["size"] += 1
        expected[json.dumps([n % 3])]["sum"] += n
    assert final_state(checkpoint, "totals") == dict(expected)
    # every tuple reached the totals: each key's largest output is its total
    outputs = emits(sink_rows(checkpoint), "totals")
    assert {k: max(o for o in outputs if o[0] == k) for k in range(3)} == {
        k: [k, 4, sum(range(k, N, 3))] for k in range(3)
    }


def test_a_failing_batch_goes_to_dead_letters_tuple_by_tuple(
    spark: SparkSession, tmp_path: Path
) -> None:
    # one micro-batch; task 1 of numbers emits the odd numbers, so 7's batch is
    # the odd numbers of key 1 that the same bolt task holds
    checkpoint = run(
        spark,
        "sb_dag_batching",
        tmp_path,
        **{"dag.n": N, "dag.poison": 7, "sr3.on.error": "dead-letter"},
    )
    rows = sink_rows(checkpoint)

    dead = [r for r in rows if r["kind"] == "dead"]
    dead_values = sorted(decode_value(r["values"]) for r in dead)
    assert [7, 1] in dead_values
    assert {r["component"] for r in dead} == {"batch"}
    assert {decode_value(r["state"])["error"] for r in dead} == {
        "ValueError: batch 1 holds 7"
    }
    # every other tuple reached the totals exactly once
    lost = {n for n, _k in dead_values}
    totals = final_state(checkpoint, "totals")
    for k in range(3):
        kept = [n for n in range(N) if n % 3 == k and n not in lost]
        assert totals.get(json.dumps([k]), {"size": 0, "sum": 0}) == {
            "size": len(kept),
            "sum": sum(kept),
        }


def test_a_tickless_batching_bolt_is_refused_before_spark_starts() -> None:
    topology = load_topology(TOPOLOGIES / "sb_dag_tickless.py")

    with pytest.raises(UnsupportedTopologyError, match="'timed'.*timer thread"):
        plan_topology(topology)
