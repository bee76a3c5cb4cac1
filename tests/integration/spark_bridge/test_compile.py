"""Compiling topologies and replaying spouts, without starting Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_bridge import ReplayError, UnsupportedTopologyError, plan_topology
from spark_bridge.__main__ import build_parser, main
from spark_bridge.rows import ComponentRef
from spark_bridge.source import SpoutPartition, SpoutStreamReader
from sr3.codec import decode_value
from storm_bridge.topology import load_topology

pytestmark = pytest.mark.spark

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"

COMPONENTS = """
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


class Seen(StatefulBolt):
    outputs = ["n"]

    def process(self, tup):
        self.state["seen"] = self.state.get("seen", 0) + 1
"""


def write_topology(directory: Path, stem: str, body: str) -> Path:
    """Write a topology file made of the shared components and ``body``."""
    path = directory / f"{stem}.py"
    path.write_text(COMPONENTS + body, encoding="utf-8")
    return path


def test_wordcount_compiles_to_a_linear_chain() -> None:
    plan = plan_topology(load_topology(WORDCOUNT))

    assert (plan.spout, plan.bolts, plan.stateful) == (
        "lines",
        ("split", "count"),
        "count",
    )


def test_a_branch_is_rejected_naming_the_component(tmp_path: Path) -> None:
    path = write_topology(
        tmp_path,
        "sb_branch_topology",
        """
class Branchy(Topology):
    numbers = Numbers.spec(par=1)
    left = Seen.spec(inputs={numbers: Grouping.fields("n")}, par=1)
    right = Seen.spec(inputs={numbers: Grouping.fields("n")}, par=1)
""",
    )

    with pytest.raises(UnsupportedTopologyError, match="'numbers' feeds several"):
        plan_topology(load_topology(path))


def test_a_stateful_bolt_needs_a_fields_grouping(tmp_path: Path) -> None:
    path = write_topology(
        tmp_path,
        "sb_shuffle_topology",
        """
class Shuffled(Topology):
    numbers = Numbers.spec(par=1)
    seen = Seen.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
""",
    )

    with pytest.raises(UnsupportedTopologyError, match="'seen' is stateful"):
        plan_topology(load_topology(path))


def test_the_spout_source_replays_each_task_range() -> None:
    ref = ComponentRef(str(WORDCOUNT), "lines", {"wordcount.lines": 10})
    reader = SpoutStreamReader(ref, max_rows=4)
    start = reader.initialOffset()

    end = reader.latestOffset(start, ReadMaxRows(4))
    parts = reader.partitions(start, end)
    rows = [row for part in parts for row in reader.read(part)]
    later = reader.latestOffset(end, ReadMaxRows(100))
    rest = [row for part in reader.partitions(end, later) for row in reader.read(part)]

    assert start == {"0": "null", "1": "null"}
    assert end == {"0": json.dumps(2), "1": json.dumps(3)}
    assert later == {"0": json.dumps(8), "1": json.dumps(9)}
    assert len(rows) == 4
    assert len(rest) == 6
    assert reader.partitions(later, reader.latestOffset(later, ReadMaxRows(4))) == []
    assert {row[0] for row in rows + rest} == {"lines"}
    assert all(len(decode_value(row[3])) == 1 for row in rows + rest)


def test_the_entry_point_rejects_a_branch_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_topology(
        tmp_path,
        "sb_cli_branch_topology",
        """
class Branchy(Topology):
    numbers = Numbers.spec(par=1)
    left = Seen.spec(inputs={numbers: Grouping.fields("n")}, par=1)
    right = Seen.spec(inputs={numbers: Grouping.fields("n")}, par=1)
""",
    )

    status = main([str(path), "--checkpoint-dir", str(tmp_path / "ckpt")])

    assert status == 2
    assert "'numbers' feeds several bolts" in capsys.readouterr().err


def test_the_entry_point_parses_conf_values_as_json() -> None:
    args = build_parser().parse_args(
        ["t.py", "--conf", "wordcount.lines=40", "--conf", "name=abc"]
    )

    assert dict(args.conf) == {"wordcount.lines": 40, "name": "abc"}


def test_a_range_the_spout_cannot_replay_is_an_error() -> None:
    ref = ComponentRef(str(WORDCOUNT), "lines", {"wordcount.lines": 10})
    reader = SpoutStreamReader(ref, max_rows=4)

    with pytest.raises(ReplayError, match="spout 'lines' task 0 did not replay"):
        list(reader.read(SpoutPartition(0, "null", json.dumps(99))))
