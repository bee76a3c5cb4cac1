"""Loading topology files by path, their plain description and their Thrift form."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from topology_api.contract import is_stateful_class
from topology_api.errors import TopologyError
from topology_api.groupings import GroupingKind, GroupingSpec
from topology_api.topology import (
    load_topology,
    read_thrift,
    thrift_bytes,
)

QUICKSTART = Path(__file__).parents[3] / "topologies" / "quickstart.py"
TOPOLOGY = """
from streamparse import Bolt, Grouping, Topology
from {helpers} import CountBolt, WordSpout

class SinkBolt(Bolt):
    outputs = []

    def process(self, tup):
        pass

class WordCount(Topology):
    config = {{"topology.message.timeout.secs": 7}}
    word_spout = WordSpout.spec(par=2)
    count_bolt = CountBolt.spec(
        inputs={{word_spout: Grouping.fields("word")}},
        par=3,
        config={{"topology.tick.tuple.freq.secs": 5, "topology.tasks": 4}},
    )
    sink = SinkBolt.spec(
        inputs={{count_bolt["direct"]: Grouping.DIRECT, count_bolt: Grouping.ALL}}
    )
"""
WriteTopology = Callable[..., Path]


def test_components_are_described(write_topology: WriteTopology) -> None:
    path = write_topology(TOPOLOGY)
    topology = load_topology(path)
    assert topology.name == path.stem
    assert topology.sys_paths[0] == str(path.parent)
    assert str(path.parent) not in sys.path  # restored after the import
    assert topology.config == {"topology.message.timeout.secs": 7}
    assert [c.name for c in topology.spouts] == ["word_spout"]
    assert [c.name for c in topology.bolts] == ["count_bolt", "sink"]

    spout = topology.components["word_spout"]
    assert (spout.kind, spout.par, spout.tasks, spout.inputs) == ("spout", 2, 2, ())
    assert spout.command == "streamparse_run"
    assert (
        spout.script
        == spout.class_path
        == f"{spout.component_cls.__module__}.WordSpout"
    )
    assert spout.outputs["default"].fields == ("word",)

    count = topology.components["count_bolt"]
    assert (count.par, count.tasks) == (3, 4)
    assert count.config == {"topology.tick.tuple.freq.secs": 5, "topology.tasks": 4}
    assert count.outputs["direct"].direct
    assert [(i.source, i.stream, i.grouping) for i in count.inputs] == [
        ("word_spout", "default", GroupingSpec(GroupingKind.FIELDS, ("word",)))
    ]
    sink = topology.components["sink"]
    assert sorted((i.stream, i.grouping.kind) for i in sink.inputs) == [
        ("default", GroupingKind.ALL),
        ("direct", GroupingKind.DIRECT),
    ]
    assert sink.script == f"{path.stem}.SinkBolt"  # defined in the topology file


def test_stateful_hook(write_topology: WriteTopology) -> None:
    topology = load_topology(write_topology(TOPOLOGY))
    assert topology.stateful_components == ["count_bolt"]
    assert is_stateful_class(topology.components["count_bolt"].component_cls)
    custom = load_topology(
        write_topology(TOPOLOGY), stateful=lambda cls: cls.__name__ == "SinkBolt"
    )
    assert custom.stateful_components == ["sink"]


def test_thrift_definition(write_topology: WriteTopology) -> None:
    topology = load_topology(write_topology(TOPOLOGY))
    thrift = read_thrift(thrift_bytes(topology))
    assert thrift.spouts.keys() == topology.thrift.spouts.keys()
    assert sorted(thrift.spouts) == ["word_spout"]
    assert sorted(thrift.bolts) == ["count_bolt", "sink"]
    spout = thrift.spouts["word_spout"]
    assert spout.spout_object.shell.execution_command == "streamparse_run"
    assert spout.spout_object.shell.script == topology.components["word_spout"].script
    assert spout.common.parallelism_hint == 2
    assert spout.common.streams["default"].output_fields == ["word"]
    count = thrift.bolts["count_bolt"].common
    assert count.parallelism_hint == 3
    (stream_id, grouping) = next(iter(count.inputs.items()))
    assert (stream_id.componentId, stream_id.streamId) == ("word_spout", "default")
    assert grouping.fields == ["word"]
    assert count.streams["direct"].direct is True
    assert '"topology.tick.tuple.freq.secs": 5' in count.json_conf
    sink = thrift.bolts["sink"].common
    kinds = {sid.streamId: g for sid, g in sink.inputs.items()}
    assert kinds["direct"].direct is not None
    assert kinds["default"].all is not None


def test_example_quickstart_thrift() -> None:
    topology = load_topology(QUICKSTART)
    thrift = read_thrift(thrift_bytes(topology))
    assert topology.name == "quickstart"
    bolt = thrift.bolts["count_bolt"]
    assert bolt.bolt_object.shell.script == "quickstart.WordCountBolt"
    assert bolt.common.parallelism_hint == 2
    assert next(iter(bolt.common.inputs.values())).fields == ["word"]
    assert (
        thrift.spouts["word_spout"].spout_object.shell.script == "quickstart.WordSpout"
    )


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="does not exist"):
        load_topology(tmp_path / "nope.py")


def test_import_failure_is_reported(write_topology: WriteTopology) -> None:
    path = write_topology(body="import no_such_module_here\n")
    with pytest.raises(TopologyError, match="No module named 'no_such_module_here'"):
        load_topology(path)


def test_sys_exit_at_import_is_reported(write_topology: WriteTopology) -> None:
    path = write_topology(body="import sys\nsys.exit(3)\n")
    with pytest.raises(TopologyError, match="failed: SystemExit: 3"):
        load_topology(path)


def test_needs_exactly_one_topology(write_topology: WriteTopology) -> None:
    body = TOPOLOGY + "\n\nclass Other(Topology):\n    spout = WordSpout.spec()\n"
    path = write_topology(body=body)
    with pytest.raises(TopologyError, match="exactly one.*one per file"):
        load_topology(path)
    assert load_topology(path, class_name="Other").topology_class.__name__ == "Other"


def test_module_name_clash(tmp_path: Path) -> None:
    path = tmp_path / "json.py"
    path.write_text("")
    with pytest.raises(TopologyError, match="already taken"):
        load_topology(path)


def test_direct_grouping_needs_a_direct_stream(write_topology: WriteTopology) -> None:
    body = TOPOLOGY.replace(
        'count_bolt["direct"]: Grouping.DIRECT',
        'count_bolt["direct"]: Grouping.SHUFFLE',
    )
    with pytest.raises(TopologyError, match="direct stream 'direct'"):
        load_topology(write_topology(body=body))


def test_par_per_environment(write_topology: WriteTopology) -> None:
    body = TOPOLOGY.replace(
        "word_spout = WordSpout.spec(par=2)",
        'word_spout = WordSpout.spec(par={{"prod": 4, "dev": 1}})',
    )
    path = write_topology(body=body)
    with pytest.raises(TopologyError, match="environment"):
        load_topology(path)
    assert load_topology(path, environment="prod").components["word_spout"].par == 4


def test_streamparse_project_layout(tmp_path: Path) -> None:
    # `sparse quickstart` puts topologies in topologies/ and their components in
    # src/, which streamparse puts on the import path beside the topology's dir
    suffix = uuid.uuid4().hex[:8]
    package = tmp_path / "src" / f"parts_{suffix}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spouts.py").write_text(textwrap.dedent(SPOUT_MODULE))
    topologies = tmp_path / "topologies"
    topologies.mkdir()
    path = topologies / f"project_{suffix}.py"
    path.write_text(PROJECT_TOPOLOGY.format(package=f"parts_{suffix}"))
    topology = load_topology(path)
    assert topology.sys_paths == (str(topologies), str(tmp_path / "src"))
    spout = topology.components["word_spout"]
    assert spout.script == f"parts_{suffix}.spouts.WordSpout"


SPOUT_MODULE = """
from streamparse import Spout


class WordSpout(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass
"""
PROJECT_TOPOLOGY = """
from streamparse import Topology
from {package}.spouts import WordSpout


class Project(Topology):
    word_spout = WordSpout.spec()
"""


def test_a_task_the_topology_lacks_is_named_with_what_exists(
    write_topology: WriteTopology,
) -> None:
    topology = load_topology(write_topology(TOPOLOGY))
    assert topology.task_problem("count_bolt", 3) is None  # topology.tasks is 4
    assert topology.task_problem("count_bolt", 4) == (
        "component 'count_bolt' has tasks 0..3"
    )
    assert topology.task_problem("count_bolt", -1) is not None
    problem = topology.task_problem("counter", 0)
    assert problem is not None
    assert "has no component 'counter'" in problem
    assert "(components: word_spout, count_bolt, sink)" in problem


def test_downstream_names_every_bolt_a_components_tuples_reach() -> None:
    # two branches: a congested word count must not hold back the join's spouts
    path = Path(__file__).parents[2] / "e2e" / "topologies" / "rebalance_topo.py"
    reach = load_topology(path).downstream()
    assert reach["lines"] == {"split", "count", "count_sink"}
    assert reach["orders"] == reach["payments"] == {"join", "join_sink"}
    assert reach["count"] == {"count_sink"}
    assert reach["join_sink"] == frozenset()
