"""The example topologies' Storm Thrift definitions, as streamparse builds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.components import BARRIER_STREAM
from topology_api.topology import load_topology, read_thrift, thrift_bytes

TOPOLOGIES = Path(__file__).parents[3] / "topologies"

# name -> {component: (kind, class, par, {(source, stream): grouping}, stateful)}
EXPECTED: dict[str, dict[str, tuple[str, str, int, dict[str, Any], bool]]] = {
    "wordcount": {
        "lines": ("spout", "Lines", 2, {}, True),
        "split": ("bolt", "Split", 2, {"lines": "shuffle"}, False),
        "count": ("bolt", "Count", 3, {"split": ["word"]}, True),
    },
    "ysb": {
        "ad_events": ("spout", "AdEvents", 2, {}, True),
        "view_filter": ("bolt", "ViewFilter", 2, {"ad_events": "shuffle"}, False),
        "campaign_join": (
            "bolt",
            "CampaignJoin",
            2,
            {"view_filter": "shuffle"},
            False,
        ),
        "window_count": (
            "bolt",
            "WindowCount",
            2,
            {"campaign_join": ["campaign_id"]},
            True,
        ),
    },
    "linear_road": {
        "position_reports": ("spout", "PositionReports", 1, {}, True),
        "segment_stats": (
            "bolt",
            "SegmentStats",
            2,
            {"position_reports": ["xway", "dir", "seg"]},
            True,
        ),
        "tolls": ("bolt", "Tolls", 2, {"segment_stats": ["vid"]}, True),
    },
    "quickstart": {
        "word_spout": ("spout", "WordSpout", 1, {}, False),
        "count_bolt": ("bolt", "WordCountBolt", 2, {"word_spout": ["word"]}, False),
    },
}
MECHANISMS = {
    "wordcount": {"count": "tree"},
    "ysb": {"window_count": "star"},
    "linear_road": {"segment_stats": "line", "tolls": "tree"},
    "quickstart": {},
}


def _grouping(grouping: Any) -> Any:
    if grouping.fields is not None:
        return list(grouping.fields)
    if grouping.shuffle is not None:
        return "shuffle"
    return "other"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_thrift_definition(name: str) -> None:
    topology = load_topology(TOPOLOGIES / f"{name}.py")
    thrift = read_thrift(thrift_bytes(topology))
    expected = EXPECTED[name]
    assert topology.name == name
    assert set(thrift.spouts) | set(thrift.bolts) == set(expected)
    for component, (kind, cls, par, inputs, stateful) in expected.items():
        spec = (thrift.spouts if kind == "spout" else thrift.bolts)[component]
        shell = (spec.spout_object if kind == "spout" else spec.bolt_object).shell
        assert shell.execution_command == "streamparse_run"
        assert shell.script == f"{name}.{cls}"
        assert spec.common.parallelism_hint == par
        got = {
            (sid.componentId, sid.streamId): _grouping(g)
            for sid, g in spec.common.inputs.items()
        }
        assert got == {(src, "default"): g for src, g in inputs.items()}
        assert (BARRIER_STREAM in spec.common.streams) is stateful
        conf = json.loads(spec.common.json_conf or "{}")
        mechanism = MECHANISMS[name].get(component)
        assert conf.get("sr3.recovery.mechanism") == mechanism
    stateful = {c for c, e in expected.items() if e[4]}
    assert set(topology.stateful_components) == stateful
