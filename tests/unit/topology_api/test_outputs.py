"""Sinks, their key fields and the last output per key (``topology_api.outputs``)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sr3.errors import ConfigError
from storm_bridge.components import BARRIER_STREAM
from topology_api.component_specs import ComponentInfo, InputInfo, OutputStream
from topology_api.groupings import GroupingKind, GroupingSpec
from topology_api.outputs import (
    KEY_FIELDS_KEY,
    LastOutputs,
    key_json,
    output_key_indexes,
    output_name,
    output_streams,
    sink_components,
)
from topology_api.topology import LoadedTopology, load_topology

SHUFFLE = GroupingSpec(GroupingKind.SHUFFLE)


def _component(
    name: str,
    *,
    fields: tuple[str, ...] = ("word", "day", "count"),
    sources: tuple[str, ...] = (),
    config: Mapping[str, Any] | None = None,
) -> ComponentInfo:
    outputs = {
        "default": OutputStream("default", fields),
        BARRIER_STREAM: OutputStream(BARRIER_STREAM, ("epoch", "info")),
    }
    return ComponentInfo(
        name=name,
        kind="bolt" if sources else "spout",
        component_cls=object,
        command="streamparse_run",
        script=f"mod.{name}",
        par=1,
        tasks=1,
        config=dict(config or {}),
        outputs=outputs,
        inputs=tuple(InputInfo(s, "default", SHUFFLE) for s in sources),
    )


def _topology(*components: ComponentInfo) -> LoadedTopology:
    return LoadedTopology(
        name="topo",
        path=Path("/nowhere/topo.py"),
        sys_paths=(),
        topology_class=object,
        config={},
        components={c.name: c for c in components},
    )


def _count_topology(config: Mapping[str, Any] | None = None) -> LoadedTopology:
    return _topology(
        _component("lines", fields=("line",)),
        _component("split", fields=("word",), sources=("lines",)),
        _component("count", sources=("split",), config=config),
    )


# -- sinks -----------------------------------------------------------------------------


def test_sinks_are_the_components_nothing_subscribes_to() -> None:
    topology = _topology(
        _component("lines"),
        _component("split", sources=("lines",)),
        _component("count", sources=("split",)),
        _component("audit", sources=("split",)),
        _component("heartbeat"),  # a spout nobody reads is a sink too
    )
    assert sink_components(topology) == ("count", "audit", "heartbeat")


def test_sinks_of_a_loaded_topology(write_topology: Callable[..., Path]) -> None:
    # the default test topology: word_spout -> count_bolt -> sink (two streams)
    topology = load_topology(write_topology())
    assert sink_components(topology) == ("sink",)


# -- key fields ------------------------------------------------------------------------


def test_the_key_defaults_to_the_first_output_field() -> None:
    assert output_key_indexes(_count_topology(), "count", {}) == (0,)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["day"], (1,)),
        (["day", "word"], (1, 0)),
        ("word,day", (0, 1)),
        (" day , count ", (1, 2)),
        ("count", (2,)),
    ],
)
def test_the_key_fields_come_from_the_conf(raw: Any, expected: tuple[int, ...]) -> None:
    topology = _count_topology()
    assert output_key_indexes(topology, "count", {KEY_FIELDS_KEY: raw}) == expected


def test_the_component_config_overrides_the_topology_conf() -> None:
    topology = _count_topology({KEY_FIELDS_KEY: ["day"]})
    conf = {KEY_FIELDS_KEY: "count"}
    assert output_key_indexes(topology, "count", conf) == (1,)
    assert output_key_indexes(topology, "split", {}) == (0,)


def test_an_unknown_key_field_names_component_field_and_valid_ones() -> None:
    topology = _count_topology({KEY_FIELDS_KEY: "word,month"})
    with pytest.raises(ConfigError) as info:
        output_key_indexes(topology, "count", {})
    text = str(info.value)
    assert "'count'" in text
    assert "'month'" in text
    assert "['word', 'day', 'count']" in text


@pytest.mark.parametrize("raw", [3, ["word", 2], "", "word,,day", []])
def test_a_malformed_key_setting_is_a_config_error(raw: Any) -> None:
    with pytest.raises(ConfigError, match=KEY_FIELDS_KEY):
        output_key_indexes(_count_topology(), "count", {KEY_FIELDS_KEY: raw})


def test_a_component_without_default_fields_has_the_empty_key() -> None:
    topology = _topology(
        _component("lines"), _component("sink", fields=(), sources=("lines",))
    )
    assert output_key_indexes(topology, "sink", {}) == ()
    with pytest.raises(ConfigError, match="valid fields: \\[\\]"):
        output_key_indexes(topology, "sink", {KEY_FIELDS_KEY: "word"})


def test_key_json_is_json_of_the_key_values() -> None:
    assert key_json(["apple", 3], (0,)) == json.dumps(["apple"])
    assert key_json(["apple", "mon", 3], (1, 0)) == '["mon", "apple"]'
    assert key_json(["apple"], (0, 1)) == '["apple", null]'  # a short tuple
    assert key_json([b"raw"], (0,)) == json.dumps([repr(b"raw")])


# -- last outputs ----------------------------------------------------------------------


def test_last_output_per_key_wins() -> None:
    outputs = LastOutputs(_count_topology())
    assert outputs.components == ("count",)
    assert outputs.to_dict() == {"count": {}}
    outputs.add("count", "default", ["pear", "mon", 1])
    outputs.add("count", "default", ["apple", "mon", 1])
    outputs.add("count", "default", ["pear", "tue", 2])
    # a replay after a rollback overwrites
    outputs.add("count", "default", ["apple", "mon", 1])
    assert outputs.to_dict() == {
        "count": {
            json.dumps(["apple"]): ["apple", "mon", 1],
            json.dumps(["pear"]): ["pear", "tue", 2],
        }
    }
    assert list(outputs.to_dict()["count"]) == ['["apple"]', '["pear"]']


def test_keys_made_of_several_fields() -> None:
    outputs = LastOutputs(_count_topology(), {KEY_FIELDS_KEY: "word,day"})
    outputs.add("count", "default", ["pear", "mon", 1])
    outputs.add("count", "default", ["pear", "tue", 1])
    outputs.add("count", "default", ["pear", "mon", 2])
    assert outputs.to_dict() == {
        "count": {
            '["pear", "mon"]': ["pear", "mon", 2],
            '["pear", "tue"]': ["pear", "tue", 1],
        }
    }


def test_an_invalid_key_setting_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="'month'"):
        LastOutputs(_count_topology(), {KEY_FIELDS_KEY: ["month"]})


def test_other_streams_and_components_are_ignored() -> None:
    outputs = LastOutputs(_count_topology())
    outputs.add("count", "default", ["pear", "mon", 1])
    outputs.add("count", "direct", ["pear", "mon", 99])
    outputs.add("count", BARRIER_STREAM, [7, {"owner": "count/0"}])
    outputs.add("split", "default", ["pear"])  # not a sink
    assert outputs.to_dict() == {"count": {'["pear"]': ["pear", "mon", 1]}}


def _alerting_topology(config: Mapping[str, Any] | None = None) -> LoadedTopology:
    # check's default stream feeds nobody; its alerts stream feeds page
    check = _component("check", sources=("lines",), config=config)
    check.outputs["alerts"] = OutputStream("alerts", ("level", "word"))
    page = dataclasses.replace(
        _component("page", sources=("check",)),
        inputs=(InputInfo("check", "alerts", SHUFFLE),),
    )
    return _topology(_component("lines", fields=("line",)), check, page)


def test_output_streams_are_the_streams_nothing_subscribes_to() -> None:
    assert output_streams(_alerting_topology()) == (
        ("check", "default"),
        ("page", "default"),
    )
    assert output_name("check", "default") == "check"
    assert output_name("check", "alerts") == "check:alerts"


def test_a_default_stream_nothing_reads_is_an_output_beside_a_read_stream() -> None:
    outputs = LastOutputs(_alerting_topology())
    outputs.add("check", "default", ["pear", "mon", 1])
    outputs.add("check", "alerts", ["high", "pear"])  # page reads it
    assert outputs.to_dict() == {
        "check": {'["pear"]': ["pear", "mon", 1]},
        "page": {},
    }


def test_a_named_stream_without_the_key_fields_is_keyed_by_its_first() -> None:
    topology = _count_topology({KEY_FIELDS_KEY: "count"})
    topology.components["count"].outputs["alerts"] = OutputStream(
        "alerts", ("level", "word")
    )
    outputs = LastOutputs(topology)
    outputs.add("count", "alerts", ["high", "pear"])
    outputs.add("count", "alerts", ["high", "plum"])
    outputs.add("count", "default", ["pear", "mon", 3])
    assert outputs.to_dict() == {
        "count": {"[3]": ["pear", "mon", 3]},
        "count:alerts": {'["high"]': ["high", "plum"]},
    }


def test_a_topology_wide_key_only_binds_the_sinks_default_streams() -> None:
    # "level" fits page's default stream; check's default stream lacks it
    topology = _alerting_topology()
    page = topology.components["page"]
    page.outputs["default"] = OutputStream("default", ("word", "level"))
    outputs = LastOutputs(topology, {KEY_FIELDS_KEY: "level"})
    outputs.add("check", "default", ["pear", "mon", 1])
    outputs.add("page", "default", ["pear", "high"])
    assert outputs.to_dict() == {
        "check": {'["pear"]': ["pear", "mon", 1]},
        "page": {'["high"]': ["pear", "high"]},
    }
    with pytest.raises(ConfigError, match="'page'"):
        LastOutputs(topology, {KEY_FIELDS_KEY: "day"})


def test_to_dict_is_a_copy_with_components_sorted() -> None:
    topology = _topology(
        _component("lines"),
        _component("zeta", sources=("lines",)),
        _component("alpha", sources=("lines",)),
    )
    outputs = LastOutputs(topology)
    outputs.add("zeta", "default", ("z", [1, 2]))
    snapshot = outputs.to_dict()
    assert list(snapshot) == ["alpha", "zeta"]
    snapshot["zeta"]['["z"]'].append("mutated")
    assert outputs.to_dict()["zeta"] == {'["z"]': ["z", [1, 2]]}
    json.dumps(snapshot)  # JSON-friendly


def test_concurrent_adds_keep_one_value_per_key() -> None:
    outputs = LastOutputs(_count_topology())

    def emit(worker: int) -> None:
        for n in range(500):
            outputs.add("count", "default", [f"w{n % 50}", worker, n])

    threads = [threading.Thread(target=emit, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    last = outputs.to_dict()["count"]
    assert sorted(last) == sorted(json.dumps([f"w{i}"]) for i in range(50))
    assert all(values[2] >= 450 for values in last.values())
