"""What a hosted component sees and may emit is what the Storm engine gives it.

``initialize(conf, context)`` gets the conf and handshake context the Storm
engine's local cluster builds (expected values come from the Storm engine's own
functions), and an emit on an undeclared stream stops the run as it kills the
task on Storm, instead of vanishing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_bridge import QueryFailedError, final_state, run_topology
from sr3.codec import decode_value
from storm_bridge.cluster import settings
from storm_bridge.cluster.context import assign_task_ids, task_context
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

TOPOLOGIES = Path(__file__).resolve().parent / "topologies"


def shown(checkpoint: Path, component: str) -> dict[str, Any]:
    """Return ``{what: decoded json}`` of the emits of a ``Show`` bolt."""
    found: dict[str, Any] = {}
    for part in sorted((checkpoint / "sink").glob("batch_id=*/*.parquet")):
        for row in pq.read_table(part).to_pylist():
            if row["kind"] == "emit" and row["component"] == component:
                what, text = decode_value(row["values"])
                found[what] = json.loads(text)
    return found


def test_initialize_gets_the_storm_engines_conf_and_context(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = TOPOLOGIES / "sb_ctx_show.py"
    overrides = {"ctx.a": "run", "ctx.b": "run", "dag.n": 6, "topology.workers": 2}
    run_topology(path, checkpoint_dir=tmp_path / "ck", conf=overrides, spark=spark)

    seen = shown(tmp_path / "ck", "show")
    conf, context = seen["conf"], seen["context"]
    # -o is topology-wide: the component's own config= wins over it, except
    # for Storm keys a component may not override
    assert conf["ctx.a"] == "run"
    assert conf["ctx.b"] == "component"
    assert conf["topology.message.timeout.secs"] == 30
    topology = load_topology(path)
    topology_conf = settings.topology_conf(topology.name, topology.config, overrides)
    show = topology.components["show"]
    assert conf == settings.component_conf(topology_conf, show.config)
    # task ids as Storm numbers them: Java order of ids, two ackers
    ids = assign_task_ids(topology, 2)
    task = min(t for t, c in ids.items() if c == "show")
    assert context == json.loads(json.dumps(task_context(topology, task, ids)))
    assert context["task->component"]["1"] == "__acker"
    # the stateful bolt next to it is unaffected
    assert final_state(tmp_path / "ck", "alpha") == {
        json.dumps([k]): {"n": sum(n for n in range(6) if n % 3 == k)} for k in range(3)
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "sb_dag_undeclared",
            "component 'loose' task 0: emit of [4, 1] on stream 'nosuch' failed: "
            "Unknown stream ID: 'nosuch' (declared: ['default'])",
        ),
        (
            "sb_dag_undeclared_spout",
            "component 'numbers' task 0: emit of [5, 2] on stream 'elsewhere' "
            "failed: Unknown stream ID: 'elsewhere' (declared: ['default'])",
        ),
    ],
)
def test_an_emit_on_an_undeclared_stream_stops_the_run_naming_it(
    spark: SparkSession, tmp_path: Path, name: str, expected: str
) -> None:
    with pytest.raises(QueryFailedError) as failure:
        run_topology(
            TOPOLOGIES / f"{name}.py",
            checkpoint_dir=tmp_path / "ck",
            conf={"dag.n": 8},
            spark=spark,
        )

    first = str(failure.value).splitlines()[0]
    assert expected in first
    assert "declare the stream" in first


def test_outputs_and_counters_are_named_as_on_the_storm_engine(
    spark: SparkSession, tmp_path: Path
) -> None:
    report = run_topology(
        TOPOLOGIES / "sb_dag_outputs.py",
        checkpoint_dir=tmp_path / "ck",
        conf={"dag.n": 12},
        spark=spark,
    )

    # one spout task and one bolt task: the last tuple per key is the largest n
    last_tag = {k: max(n for n in range(12) if n % 3 == k) for k in range(3)}
    last_even = {k: max(n for n in range(0, 12, 2) if n % 3 == k) for k in range(3)}
    assert report["outputs"] == {
        # tag's default stream is subscribed by nobody: an output, as on Storm
        "tag": {json.dumps([k]): [n, k] for k, n in last_tag.items()},
        # keyed by the topology config's k, not by the first field n
        "last": {json.dumps([k]): [n, k] for k, n in last_even.items()},
    }
    # every component, with the Storm engine's counter names
    fields = {
        "spout_emitted",
        "bolt_acked",
        "emitted",
        "acked",
        "failed",
        "restarts",
        "errors",
    }
    counters = report["counters"]
    assert set(counters) == {"numbers", "tag", "last"}
    assert all(set(c) == fields for c in counters.values())
    assert counters["numbers"]["spout_emitted"] == counters["numbers"]["emitted"] == 12
    assert counters["last"]["emitted"] == 6


def test_a_spout_with_tuple_offsets_replays_in_several_micro_batches(
    spark: SparkSession, tmp_path: Path
) -> None:
    # 3 tuples per micro-batch: 4 batches of (file, line) offsets
    report = run_topology(
        TOPOLOGIES / "sb_dag_pairs.py",
        checkpoint_dir=tmp_path / "ck",
        conf={"dag.n": 6},
        max_rows_per_batch=3,
        spark=spark,
    )

    assert report["idle"]
    assert report["batches"] == 4
    assert final_state(tmp_path / "ck", "lines") == {
        json.dumps(["a.log"]): {"lines": 6},
        json.dumps(["b.log"]): {"lines": 6},
    }


def test_emitting_a_bare_string_fails_as_pystorm_refuses_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(QueryFailedError) as failure:
        run_topology(
            TOPOLOGIES / "sb_dag_pairs.py",
            checkpoint_dir=tmp_path / "ck",
            conf={"dag.n": 4, "dag.text": True},
            spark=spark,
        )

    first = str(failure.value).splitlines()[0]
    assert "bolt 'prose' failed on tuple ['b.log', 2]" in first
    assert "TypeError: All Tuples must be either lists or tuples" in first


def test_a_topology_set_for_native_storm_checkpoints_runs_its_bolts_on_spark() -> None:
    # a topology written for real Storm says sr3.checkpoint.mode=native; on Spark
    # the bridge keeps the state, so its StatefulBolts must not ask for a ring
    from spark_bridge.context import storm_conf  # noqa: PLC0415 (the unit under test)
    from spark_bridge.hosting import BoltHost  # noqa: PLC0415

    topology = load_topology(Path(__file__).parents[3] / "topologies" / "wordcount.py")
    overrides = {"sr3.checkpoint.mode": "native", "sr3.zk.hosts": "127.0.0.1:1"}
    conf = storm_conf(topology, "count", overrides)
    assert "sr3.checkpoint.mode" not in conf
    assert "sr3.zk.hosts" not in conf
    host = BoltHost(topology, "count", 0, overrides)
    assert host.instance.keyed_state is not None
