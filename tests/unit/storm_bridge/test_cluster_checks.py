"""Topologies the local cluster cannot run are refused before any task starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storm_bridge.cluster import LocalCluster
from storm_bridge.cluster.checks import check_runnable
from topology_api.errors import TopologyError
from topology_api.topology import load_topology

STATEFUL = """
from streamparse import Grouping, Spout, Topology
from storm_bridge import StatefulBolt


class Numbers(Spout):
    outputs = ["n", "parity"]

    def next_tuple(self):
        pass


class Tally(StatefulBolt):
    outputs = ["n"]

    def process(self, tup):
        pass


class KeyedTally(Tally):
    def state_key(self, tup):
        return (tup.values[1],)


class T(Topology):
    numbers = Numbers.spec()
    tally = {tally}.spec(inputs={{numbers: {grouping}}}, par=2)
"""
CUSTOM = """
from streamparse import Grouping, Topology
from {helpers} import WordSpout, CountBolt


class T(Topology):
    word_spout = WordSpout.spec()
    count_bolt = CountBolt.spec(
        inputs={{word_spout: Grouping.custom_object("org.example.Mine", [])}}
    )
"""
WriteTopology = Callable[..., Path]


@pytest.mark.parametrize(
    "grouping", ["Grouping.SHUFFLE", "Grouping.ALL", "Grouping.NONE"]
)
def test_a_stateful_bolt_needs_a_key(
    write_topology: WriteTopology, grouping: str
) -> None:
    body = STATEFUL.replace("{tally}", "Tally").replace("{grouping}", grouping)
    topology = load_topology(write_topology(body))
    with pytest.raises(TopologyError) as caught:
        check_runnable(topology)
    message = str(caught.value)
    assert "'tally'" in message
    assert "'numbers'" in message
    assert "Grouping.fields(" in message
    assert "state_key" in message


@pytest.mark.parametrize(
    ("tally", "grouping"),
    [
        ("Tally", 'Grouping.fields("parity")'),
        ("Tally", "Grouping.GLOBAL"),
        ("KeyedTally", "Grouping.SHUFFLE"),
    ],
)
def test_keyed_stateful_bolts_run(
    write_topology: WriteTopology, tally: str, grouping: str
) -> None:
    body = STATEFUL.replace("{tally}", tally).replace("{grouping}", grouping)
    check_runnable(load_topology(write_topology(body)))


def test_custom_groupings_are_refused_up_front(write_topology: WriteTopology) -> None:
    topology = load_topology(write_topology(CUSTOM))
    with pytest.raises(TopologyError) as caught:
        check_runnable(topology)
    message = str(caught.value)
    assert "'count_bolt'" in message
    assert "'word_spout'" in message
    assert "CUSTOM_OBJECT" in message
    assert "org.example.Mine" in message
    assert "shuffle, fields or partial-key grouping" in message


def test_the_example_topologies_run(write_topology: WriteTopology) -> None:
    check_runnable(load_topology(write_topology()))


def test_the_local_cluster_refuses_before_starting(
    write_topology: WriteTopology,
) -> None:
    body = STATEFUL.replace("{tally}", "Tally").replace("{grouping}", "Grouping.ALL")
    with pytest.raises(TopologyError, match="'tally'"):
        LocalCluster(write_topology(body))


def test_partial_key_grouping_runs(write_topology: WriteTopology) -> None:
    body = CUSTOM.replace(
        'Grouping.custom_object("org.example.Mine", [])', "partial_key_grouping()"
    ).replace(
        "from streamparse import Grouping, Topology",
        "from streamparse import Grouping, Topology\n"
        "from storm_bridge import partial_key_grouping",
    )
    check_runnable(load_topology(write_topology(body)))


def test_partial_key_grouping_with_fields_is_refused(
    write_topology: WriteTopology,
) -> None:
    body = CUSTOM.replace(
        "org.example.Mine", "org.apache.storm.grouping.PartialKeyGrouping"
    ).replace("[])", '["word"])')
    with pytest.raises(TopologyError) as caught:
        check_runnable(load_topology(write_topology(body)))
    message = str(caught.value)
    assert "['word']" in message
    assert "storm_bridge.partial_key_grouping('field', ...)" in message
