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
from spark_bridge.stages import error_policy
from sr3.codec import decode_value
from sr3.errors import ConfigError
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
LINEAR_ROAD = WORDCOUNT.with_name("linear_road.py")

COMPONENTS = """
from streamparse import Bolt, Grouping, Spout, Stream, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


class Plain(Spout):
    outputs = ["n"]

    def next_tuple(self):
        pass


class Echo(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit(tup.values)


class Director(Bolt):
    outputs = [Stream(fields=["n"], direct=True)]

    def process(self, tup):
        self.emit(tup.values)


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


def test_wordcount_compiles_to_one_stateful_update_query() -> None:
    plan = plan_topology(load_topology(WORDCOUNT))

    assert (plan.spouts, plan.bolts, plan.stateful, plan.sinks) == (
        ("lines",),
        ("split", "count"),
        ("count",),
        ("count",),
    )
    assert (plan.output_mode, plan.session_conf) == ("update", {})


def test_linear_road_chains_two_stateful_bolts_in_append_mode() -> None:
    plan = plan_topology(load_topology(LINEAR_ROAD))

    assert plan.stateful == ("segment_stats", "tolls")
    assert plan.output_mode == "append"
    assert (
        "RocksDB" in plan.session_conf["spark.sql.streaming.stateStore.providerClass"]
    )


def test_a_branch_orders_bolts_and_keeps_shared_emits(tmp_path: Path) -> None:
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

    plan = plan_topology(load_topology(path))

    assert plan.bolts == ("left", "right")
    assert plan.sinks == ("left", "right")
    assert plan.routing(0).keeps("numbers", "default")
    assert not plan.routing(1).keeps("numbers", "default")
    assert plan.routing(1).keeps("left", "default")


def test_a_direct_grouping_is_rejected_naming_component_and_grouping(
    tmp_path: Path,
) -> None:
    path = write_topology(
        tmp_path,
        "sb_direct_topology",
        """
class Direct(Topology):
    numbers = Numbers.spec(par=1)
    director = Director.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
    echo = Echo.spec(inputs={director: Grouping.DIRECT}, par=1)
""",
    )

    with pytest.raises(UnsupportedTopologyError, match="'echo' subscribes.*DIRECT"):
        plan_topology(load_topology(path))


def test_an_unknown_error_policy_is_a_config_error(tmp_path: Path) -> None:
    path = write_topology(
        tmp_path,
        "sb_policy_topology",
        """
class Policy(Topology):
    numbers = Numbers.spec(par=1)
    seen = Seen.spec(
        inputs={numbers: Grouping.fields("n")},
        par=1,
        config={"sr3.on.error": "ignore"},
    )
""",
    )
    topology = load_topology(path)

    with pytest.raises(ConfigError, match="'seen': sr3.on.error='ignore'"):
        error_policy(topology, "seen", {})


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
    emits = [row for row in rows + rest if row[2] == "emit"]
    offsets = [
        (row[1], decode_value(row[3])) for row in rows + rest if row[2] != "emit"
    ]
    assert len(rows) == 4 + 2
    assert len(rest) == 6 + 2
    assert offsets == [("0", 2), ("1", 3), ("0", 8), ("1", 9)]
    assert [row[6] for row in rows] == [
        "000000000.0000",
        "000000001.0000",
        "",
        "000000000.0001",
        "000000001.0001",
        "",
    ]
    assert reader.partitions(later, reader.latestOffset(later, ReadMaxRows(4))) == []
    assert {row[0] for row in rows + rest} == {"lines"}
    assert all(len(decode_value(row[3])) == 1 for row in emits)


def test_start_offsets_make_a_task_continue_after_them() -> None:
    ref = ComponentRef(str(WORDCOUNT), "lines", {"wordcount.lines": 10})
    reader = SpoutStreamReader(ref, max_rows=100, start_offsets={"lines/1": 5})
    start = reader.initialOffset()

    end = reader.latestOffset(start, ReadMaxRows(100))
    rows = [row for part in reader.partitions(start, end) for row in reader.read(part)]

    assert start == {"0": "null", "1": "5"}
    # task 1 emits the odd lines: after 5 come 7 and 9
    assert sum(1 for row in rows if row[2] == "emit" and row[6].endswith(".0001")) == 2


def test_the_entry_point_rejects_a_plain_spout_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_topology(
        tmp_path,
        "sb_cli_plain_topology",
        """
class PlainTopology(Topology):
    plain = Plain.spec(par=1)
    seen = Seen.spec(inputs={plain: Grouping.fields("n")}, par=1)
""",
    )

    status = main([str(path), "--checkpoint-dir", str(tmp_path / "ckpt")])

    assert status == 2
    err = capsys.readouterr().err
    assert "'plain' is a plain Spout" in err
    assert "subclass storm_bridge.ReplayableSpout" in err


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


def test_a_spout_tuple_beyond_64_bits_is_carried_as_storms_json_carries_it() -> None:
    branch = Path(__file__).resolve().parent / "topologies" / "sb_dag_branch.py"
    # [n * 2**70, k] needs more than 64 bits from n = 1 on
    ref = ComponentRef(str(branch), "numbers", {"dag.scale": 2**70})
    reader = SpoutStreamReader(ref, max_rows=4)

    rows = list(reader.read(SpoutPartition(0, "null", json.dumps(2))))

    values = [decode_value(r[3]) for r in rows if r[2] == "emit"]
    assert values == [[0, 0], [2 * 2**70, 2]]
