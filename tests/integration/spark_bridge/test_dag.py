"""DAG topologies on Spark: branch, join, stateful chain, ALL grouping, errors.

Every expected value is computed here in plain Python over the numbers the
``Numbers`` spout generates (see ``topologies/sb_dag_parts.py``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_bridge import QueryFailedError, final_state, run_topology
from spark_bridge.keyed import StatefulStage
from spark_bridge.rows import COLUMNS, ComponentRef
from spark_bridge.stages import GROUP_COLUMN, ROWS_COLUMN, Routing, pack
from sr3.codec import decode_value, encode_key, encode_value

pytestmark = pytest.mark.spark

TOPOLOGIES = Path(__file__).resolve().parent / "topologies"
N = 12


def sink_rows(checkpoint: Path) -> list[dict[str, Any]]:
    """Return every row the sink wrote, all batches together."""
    rows: list[dict[str, Any]] = []
    for part in sorted((checkpoint / "sink").glob("batch_id=*/*.parquet")):
        rows.extend(pq.read_table(part).to_pylist())
    return rows


def emits(rows: list[dict[str, Any]], component: str) -> list[list[Any]]:
    return [
        decode_value(r["values"])
        for r in rows
        if r["kind"] == "emit" and r["component"] == component
    ]


def sums_by_key(numbers: list[int], key: Any) -> dict[str, dict[str, int]]:
    """Expected ``Sums`` state of ``numbers`` from one component, keyed by ``key``."""
    state: dict[str, dict[str, int]] = defaultdict(dict)
    for n in numbers:
        fields = state[json.dumps([key(n)])]
        fields["numbers"] = fields.get("numbers", 0) + n
        fields["count"] = fields.get("count", 0) + 1
    return dict(state)


def run(
    spark: SparkSession, name: str, tmp_path: Path, *, rows: int = 1000, **conf: Any
) -> Path:
    """Run a test topology with ``rows`` spout tuples per micro-batch."""
    checkpoint = tmp_path / name
    run_topology(
        TOPOLOGIES / f"{name}.py",
        checkpoint_dir=checkpoint,
        conf=conf,
        max_rows_per_batch=rows,
        spark=spark,
    )
    return checkpoint


def test_a_branch_feeds_a_stateless_and_a_stateful_bolt(
    spark: SparkSession, tmp_path: Path
) -> None:
    # two micro-batches (3 numbers per spout task each)
    checkpoint = run(spark, "sb_dag_branch", tmp_path, rows=6, **{"dag.n": N})
    rows = sink_rows(checkpoint)

    assert sorted(v[0] for v in emits(rows, "double")) == [2 * n for n in range(N)]
    assert len(emits(rows, "sums")) == N
    # the spout is not a sink: its emits are dropped once both branches ran
    assert emits(rows, "numbers") == []
    assert final_state(checkpoint, "sums") == sums_by_key(
        list(range(N)), lambda n: n % 3
    )
    offsets = {
        r["stream"]: decode_value(r["values"]) for r in rows if r["kind"] == "offset"
    }
    assert offsets == {"0": N - 2, "1": N - 1}


def test_two_spouts_join_in_one_stateful_bolt(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = run(spark, "sb_dag_join", tmp_path, **{"dag.n": N})

    expected: dict[str, dict[str, int]] = {}
    for k in range(3):
        ns = [n for n in range(N) if n % 3 == k]
        expected[json.dumps([k])] = {
            "left": sum(ns),
            "right": sum(100 * n for n in ns),
            "count": 2 * len(ns),
        }
    state = final_state(checkpoint, "sums")
    assert state == expected


def test_two_stateful_bolts_chain(spark: SparkSession, tmp_path: Path) -> None:
    # three micro-batches: state of both bolts carries over between them
    checkpoint = run(spark, "sb_dag_chain", tmp_path, rows=5, **{"dag.n": N})

    counts: Counter[int] = Counter()
    parity_of: dict[int, int] = {}
    for n in range(N):  # one spout task: each key sees its numbers in order
        counts[n % 3] += 1
        parity_of[n] = counts[n % 3] % 2
    expected_sums: dict[str, dict[str, int]] = {}
    for parity in (0, 1):
        ns = [n for n in range(N) if parity_of[n] == parity]
        expected_sums[json.dumps([parity])] = {"occurrences": sum(ns), "count": len(ns)}
    assert final_state(checkpoint, "occurrences") == {
        json.dumps([k]): {"count": counts[k]} for k in range(3)
    }
    assert final_state(checkpoint, "sums") == expected_sums


def test_an_all_grouping_runs_every_tuple_on_every_task(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = run(spark, "sb_dag_all", tmp_path, **{"dag.n": N})

    fanned = Counter(tuple(v) for v in emits(sink_rows(checkpoint), "fan"))
    assert fanned == Counter((n, t) for n in range(N) for t in range(3))


def test_a_raising_bolt_fails_the_query_naming_component_key_and_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(QueryFailedError) as failure:
        run(spark, "sb_dag_picky", tmp_path, **{"dag.n": N})

    text = str(failure.value)
    assert "bolt 'picky' failed on tuple [7, 1]" in text
    assert "key [1]" in text
    assert "batch 0" in text
    assert "seven is not allowed" in text
    assert "sr3.on.error=dead-letter" in text


def test_dead_letter_diverts_the_tuple_and_rolls_its_key_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = run(
        spark, "sb_dag_picky", tmp_path, **{"dag.n": N, "sr3.on.error": "dead-letter"}
    )
    rows = sink_rows(checkpoint)

    expected: dict[str, dict[str, Any]] = {}
    for k in range(3):
        ns = [n for n in range(N) if n % 3 == k and n != 7]
        expected[json.dumps([k])] = {"sum": sum(ns), "seen": ns}
    assert final_state(checkpoint, "picky") == expected
    dead = [r for r in rows if r["kind"] == "dead"]
    assert len(dead) == 1
    assert dead[0]["component"] == "picky"
    assert decode_value(dead[0]["values"]) == [7, 1]
    assert dead[0]["key"] == encode_key((1,))
    report = decode_value(dead[0]["state"])
    assert report["source"] == "numbers"
    assert report["error"] == "ValueError: seven is not allowed"
    # the failing call's emit is dropped: 7 is never part of a sum
    assert [1, 1 + 4 + 7] not in emits(rows, "picky")
    assert len(emits(rows, "picky")) == N - 1


def keyed_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Return what a KeyStage yields for rows given with their group key last."""
    groups: dict[bytes, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        groups[row[-1]].append(row[: len(COLUMNS)])
    packed = [(gkey, pack(group)) for gkey, group in groups.items()]
    return pd.DataFrame(packed, columns=[GROUP_COLUMN, ROWS_COLUMN])


def test_restore_rows_install_state_without_a_state_row() -> None:
    path = str(TOPOLOGIES / "sb_dag_picky.py")
    stage = StatefulStage(
        ComponentRef(path, "picky", {}), Routing(frozenset(), frozenset({"picky"}))
    )
    key = encode_key((1,))
    restored = encode_value({"sum": 100, "seen": [100]})
    restore = ("picky", "", "restore", None, key, restored, "")

    out, blob, write = stage.apply(key, iter([keyed_frame([(*restore, key)])]), None)

    assert out == []
    assert write
    assert blob is not None
    assert decode_value(blob) == {"sum": 100, "seen": [100]}

    # Spark already holds state: a restore row is ignored; tuples run in seq order.
    later = [
        (
            "numbers",
            "default",
            "emit",
            encode_value([4, 1]),
            key,
            None,
            "000000001.0000",
        ),
        (
            "numbers",
            "default",
            "emit",
            encode_value([1, 1]),
            key,
            None,
            "000000000.0000",
        ),
    ]
    frame = keyed_frame([(*r, key) for r in [*later, restore]])
    out, blob, write = stage.apply(key, iter([frame]), encode_value({"sum": 5}))

    assert [decode_value(r[3]) for r in out if r[2] == "emit"] == [[1, 6], [1, 10]]
    assert [r[6] for r in out if r[2] == "emit"] == [
        "000000000.0000.000000",
        "000000001.0000.000000",
    ]
    assert write
    assert blob is not None
    assert decode_value(blob) == {"sum": 10, "seen": [1, 4]}
    assert [r for r in out if r[2] == "state"] == [
        ("picky", "", "state", None, key, blob, "")
    ]


def test_a_failing_initialize_is_named_first_with_its_component_and_fix(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(QueryFailedError) as failure:
        run(spark, "sb_dag_needy", tmp_path, **{"dag.n": N})

    first = str(failure.value).splitlines()[0]
    assert "component 'needy' task 0 failed in initialize()" in first
    assert "KeyError: 'needy.url'" in first

    checkpoint = run(spark, "sb_dag_needy", tmp_path, **{"needy.url": "x"})
    assert sorted(emits(sink_rows(checkpoint), "needy")) == [[n, "x"] for n in range(N)]


def test_tuples_cross_components_as_storms_json_multilang_carries_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Storm's default (JSON) serializer turns dict keys into strings and
    # Python tuples into lists; the same bolt must see the same values on Spark
    checkpoint = run(spark, "sb_dag_dicts", tmp_path, **{"dag.n": 3})

    state = final_state(checkpoint, "kinds")
    # with dag.n = 3, key k sees only n = k
    wrapped = {n: {n: n, True: 1, None: 2, 1.5: 3} for n in range(3)}
    carried = {n: json.loads(json.dumps(m)) for n, m in wrapped.items()}
    assert state == {
        json.dumps([n]): {"keys": sorted(repr(key) for key in m), "pair": "list"}
        for n, m in carried.items()
    }
