"""Word count on Spark: the example topology, unchanged, against the true counts."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_bridge import QueryFailedError, final_state, run_topology
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"


def true_counts(lines: int) -> dict[str, dict[str, int]]:
    """Count the words of the example's corpus, keyed as state dump shows them."""
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    words = Counter(w for line in module.corpus(lines, 8, 7) for w in line.split())
    return {json.dumps([word]): {"n": n} for word, n in sorted(words.items())}


def test_wordcount_final_state_is_the_true_counts(
    spark: SparkSession, tmp_path: Path
) -> None:
    report = run_topology(
        WORDCOUNT,
        checkpoint_dir=tmp_path,
        conf={"wordcount.lines": 400},
        max_rows_per_batch=150,
        spark=spark,
    )

    assert final_state(tmp_path) == true_counts(400)
    assert final_state(tmp_path, "count") == true_counts(400)
    assert report["input_rows"] == 400
    assert report["batches"] >= 3
    assert report["emitted"] == {"count": 400 * 8}
    assert report["stateful"] == ["count"]


def test_rerun_resumes_offsets_and_state_from_the_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    run_topology(
        WORDCOUNT,
        checkpoint_dir=tmp_path,
        conf={"wordcount.lines": 200},
        max_rows_per_batch=1000,
        spark=spark,
    )
    # The corpus of 300 lines starts with the 200 already counted: the spouts
    # resume after their committed offsets and the counts continue.
    report = run_topology(
        WORDCOUNT,
        checkpoint_dir=tmp_path,
        conf={"wordcount.lines": 300},
        max_rows_per_batch=1000,
        spark=spark,
    )

    assert report["input_rows"] == 100
    assert final_state(tmp_path) == true_counts(300)


FAILING = """
from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


class Numbers(ReplayableSpout):
    outputs = ["n"]

    def initialize(self, conf, context):
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next < 6:
            self.emit([self.next % 3], offset=self.next)
            self.next += 1


class Picky(StatefulBolt):
    outputs = ["n"]

    def process(self, tup):
        if tup.values[0] == 2:
            raise ValueError("two is not allowed")
        self.state["seen"] = self.state.get("seen", 0) + 1


class Failing(Topology):
    numbers = Numbers.spec(par=1)
    picky = Picky.spec(inputs={numbers: Grouping.fields("n")}, par=1)
"""


def test_a_failing_bolt_names_component_key_and_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = tmp_path / "sb_failing_topology.py"
    path.write_text(FAILING, encoding="utf-8")

    with pytest.raises(QueryFailedError) as failure:
        run_topology(path, checkpoint_dir=tmp_path / "ckpt", spark=spark)

    text = str(failure.value)
    assert "bolt 'picky' failed on tuple [2]" in text
    assert "key [2]" in text
    assert "batch 0" in text
    assert "two is not allowed" in text
