"""What an emit returns and which ticks a bolt gets on Spark, as on the Storm engine.

``emit(..., need_task_ids=True)`` returns the Storm task ids the tuple went
to, numbered as the Storm engine numbers them, and those tasks are the ones
that receive it. A bolt with ``topology.tick.tuple.freq.secs`` gets tick
tuples (stateless or stateful); one without it never does.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_bridge import QueryFailedError, final_state, run_topology
from spark_bridge.context import task_ids
from storm_bridge.cluster.context import Router
from tests.integration.spark_bridge.test_dag import emits, sink_rows
from topology_api.java_hash import IntegerBoxing
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

TOPOLOGIES = Path(__file__).resolve().parent / "topologies"
TASK_IDS = TOPOLOGIES / "sb_task_ids.py"
TICKS = TOPOLOGIES / "sb_ticks.py"
N = 12
#: Components the task-ids topology reaches through a shuffle grouping.
SHUFFLED = ("relay", "shuf")


def returned_ids(outputs: dict[str, Any], emitter: str) -> dict[int, list[int]]:
    """Return n -> what ``emitter``'s emit of n returned (its ``ids`` stream)."""
    found: dict[int, list[int]] = {}
    for what, ids in outputs.get(f"{emitter}:ids", {}).values():
        found[int(what.split()[1])] = ids
    return found


def deliveries(outputs: dict[str, Any]) -> dict[tuple[str, int], list[int]]:
    """Return (sending component, n) -> task ids that received it, sorted."""
    found: dict[tuple[str, int], list[int]] = defaultdict(list)
    for name, entries in outputs.items():
        if ":" in name:
            continue
        for at, n in entries.values():
            source, _n, _arrow, _component, task, _from, _sender, _kind = at.split()
            found[(source, n)].append(int(task))
    return {key: sorted(tasks) for key, tasks in found.items()}


def senders(outputs: dict[str, Any]) -> dict[tuple[str, int], set[tuple[int, str]]]:
    """Return (sending component, n) -> {(the tuple's task, type of its k)}."""
    found: dict[tuple[str, int], set[tuple[int, str]]] = defaultdict(set)
    for name, entries in outputs.items():
        if ":" in name:
            continue
        for at, n in entries.values():
            source, _n, _arrow, _component, _task, _from, sender, kind = at.split()
            found[(source, n)].add((int(sender), kind))
    return dict(found)


def storm_ids(emitter: str, stream: str, n: int) -> list[int | None]:
    """Return the ids Storm's router sends ``emitter``'s n to (shuffles as None)."""
    topology = load_topology(TASK_IDS)
    ids = task_ids(topology, {})
    router = Router(topology, ids, rng=random.Random(0), boxing=IntegerBoxing.LONG)
    sender = min(t for t, c in ids.items() if c == emitter)
    # relay emits k as bytes, which Storm's JSON multilang hands on as str
    values = [n, n % 3] if emitter == "source" else [n, str(n % 3)]
    return [
        None if ids[t] in SHUFFLED else t
        for t in router.targets(sender, stream, values)
    ]


def masked(ids: list[int]) -> list[int | None]:
    names = task_ids(load_topology(TASK_IDS), {})
    return [None if names[t] in SHUFFLED else t for t in ids]


def test_need_task_ids_returns_the_storm_tasks_that_receive_the_tuple(
    spark: SparkSession, tmp_path: Path
) -> None:
    report = run_topology(
        TASK_IDS,
        checkpoint_dir=tmp_path / "ck",
        conf={"ids.n": N},
        max_rows_per_batch=4,
        spark=spark,
    )

    outputs = report["outputs"]
    received = deliveries(outputs)
    for emitter, stream in (("source", "default"), ("relay", "fwd")):
        returned = returned_ids(outputs, emitter)
        assert sorted(returned) == list(range(N))
        for n, ids in returned.items():
            # the tasks the emit named are the tasks that got the tuple
            assert sorted(ids) == received[(emitter, n)], (emitter, n)
            # in Storm's order and numbering (ALL, fields, global; the
            # shuffles' picks are random on Storm)
            assert masked(ids) == storm_ids(emitter, stream, n), (emitter, n)
    # a bolt sees the emitting task as the tuple's task, and bytes as str
    names = task_ids(load_topology(TASK_IDS), {})
    spout_tasks = sorted(t for t, c in names.items() if c == "source")
    tuples = senders(outputs)
    for n in range(N):
        assert tuples[("source", n)] == {(spout_tasks[n % 2], "int")}
        [relay] = [t for t in received[("source", n)] if names[t] == "relay"]
        assert tuples[("relay", n)] == {(relay, "str")}
    # the shuffle spreads over its tasks, as Storm's shuffle does
    relayed = {t for n in range(N) for t in received[("source", n)]}
    assert len({t for t in relayed if names[t] == "relay"}) > 1


def test_ticked_bolts_flush_on_spark_and_unticked_ones_get_no_ticks(
    spark: SparkSession, tmp_path: Path
) -> None:
    # several micro-batches; the stateless buffer and the stateful agg only
    # emit from process_tick
    checkpoint = tmp_path / "ck"
    report = run_topology(
        TICKS,
        checkpoint_dir=checkpoint,
        conf={"ticks.n": N},
        max_rows_per_batch=4,
        spark=spark,
    )

    by_key = {k: len(range(k, N, 3)) for k in range(3)}
    assert final_state(checkpoint, "total") == {
        json.dumps([k]): {"total": count} for k, count in by_key.items()
    }
    assert final_state(checkpoint, "agg") == {
        json.dumps([k]): {"seen": count} for k, count in by_key.items()
    }
    assert report["outputs"]["total"] == {
        json.dumps([k]): [k, count] for k, count in by_key.items()
    }
    # no topology.tick.tuple.freq.secs: Storm never ticks it
    assert not report["outputs"].get("silent")
    assert report["counters"]["silent"]["emitted"] == 0


def test_a_spout_gets_ack_for_each_tuple_it_emitted_with_a_message_id(
    spark: SparkSession, tmp_path: Path
) -> None:
    acks = tmp_path / "acks"
    acks.mkdir()
    # three micro-batches of four tuples
    report = run_topology(
        TOPOLOGIES / "sb_acks.py",
        checkpoint_dir=tmp_path / "ck",
        conf={"acks.n": N, "acks.dir": str(acks)},
        max_rows_per_batch=4,
        spark=spark,
    )

    assert report["idle"]
    spout_tasks = sorted(
        t
        for t, c in task_ids(load_topology(TOPOLOGIES / "sb_acks.py"), {}).items()
        if c == "source"
    )
    # each tuple acked once, by the task that emitted it
    for index, task in enumerate(spout_tasks):
        acked = (acks / f"{task}.acks").read_text(encoding="utf-8").split()
        assert sorted(acked) == sorted(f"m{n}" for n in range(index, N, 2))


def test_a_lone_stateful_bolt_is_ticked_after_its_keys_in_each_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    # one stateful bolt: applyInPandasWithState, not transformWithStateInPandas
    checkpoint = tmp_path / "ck"
    run_topology(
        TOPOLOGIES / "sb_ticks_one.py",
        checkpoint_dir=checkpoint,
        conf={"ticks.n": N},
        max_rows_per_batch=4,
        spark=spark,
    )

    sums: dict[int, int] = defaultdict(int)
    for k, count in emits(sink_rows(checkpoint), "agg"):
        sums[k] += count
    assert dict(sums) == {k: len(range(k, N, 3)) for k in range(3)}


def test_a_spout_that_raises_stops_the_run_naming_it_and_its_offset(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(QueryFailedError) as failure:
        run_topology(
            TOPOLOGIES / "sb_spout_raises.py",
            checkpoint_dir=tmp_path / "ck",
            max_rows_per_batch=2,
            spark=spark,
        )

    first = str(failure.value).splitlines()[0]
    assert "spout 'source' task 0 raised in next_tuple() at offset 4" in first
    assert "OSError: the source went away" in first
