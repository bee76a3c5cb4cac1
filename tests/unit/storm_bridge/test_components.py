"""StatefulBolt and ReplayableSpout driven through in-memory multilang streams."""

from __future__ import annotations

import io
from typing import Any

import pytest
from streamparse import Bolt, Grouping, Spout, Topology

from storm_bridge import ReplayableSpout, StatefulBolt, StateKeyError
from storm_bridge.components import (
    BARRIER_COMMAND,
    BARRIER_STREAM,
    RESTORED_METRIC,
    SNAPSHOT_METRIC,
)
from storm_bridge.multilang import get_serializer
from topology_api.barriers import END_OF_INPUT_METRIC, LOCAL_CLUSTER_KEY, WAITING_METRIC
from topology_api.contract import (
    ReplayableComponent,
    StatefulComponent,
    is_replayable_class,
    is_stateful_class,
    overrides_state_key,
)

JSON = get_serializer("json")


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def process(self, tup):
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])


class CountByFirstLetter(Count):
    def state_key(self, tup):
        return (tup.values[0][0],)


class Numbers(ReplayableSpout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.sought: list[Any] = []
        self.next_n = 0

    def seek(self, offset):
        self.sought.append(offset)
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < 3:
            self.emit([self.next_n], offset=self.next_n)
            self.next_n += 1


def context(component: str, grouping: dict[str, Any] | None) -> dict[str, Any]:
    sources = {} if grouping is None else {"split": {"default": grouping}}
    return {
        "task->component": {"1": "split", "2": component, "3": component},
        "taskid": 3,
        "componentid": component,
        "streams": ["default", BARRIER_STREAM],
        "source->stream->grouping": sources,
        "source->stream->fields": {"split": {"default": ["word", "extra"]}},
    }


def tuple_msg(values: list[Any], *, tid: str, stream: str = "default") -> bytes:
    return JSON.encode(
        {"id": tid, "comp": "split", "stream": stream, "task": 1, "tuple": values}
    )


def messages(out: io.BytesIO) -> list[Any]:
    out.seek(0)
    return list(JSON.iter_messages(out, component="test", task_id=0))


def drive(bolt_cls: type, inputs: list[bytes], grouping: Any = "fields") -> Any:
    group = {"type": "FIELDS", "fields": ["word"]} if grouping == "fields" else grouping
    out = io.BytesIO()
    bolt = bolt_cls(input_stream=io.BytesIO(b"".join(inputs)), output_stream=out)
    bolt._setup_component({"topology.name": "t"}, context("count", group))
    bolt.initialize({}, {})
    for _ in inputs:
        bolt._run()
    return bolt, messages(out)


def emits(msgs: list[Any], stream: str | None = None) -> list[Any]:
    return [
        m["tuple"]
        for m in msgs
        if m.get("command") == "emit" and m.get("stream") == stream
    ]


def test_state_is_scoped_to_the_fields_grouping_key() -> None:
    inputs = [
        tuple_msg(["a", 1], tid="1"),
        tuple_msg(["b", 1], tid="2"),
        tuple_msg(["a", 2], tid="3"),
    ]
    bolt, msgs = drive(Count, inputs)
    assert emits(msgs) == [["a", 1], ["b", 1], ["a", 2]]
    assert [m["id"] for m in msgs if m.get("command") == "ack"] == ["1", "2", "3"]
    assert dict(bolt.keyed_state.items()) == {("a",): {"n": 2}, ("b",): {"n": 1}}


def test_state_key_can_be_overridden() -> None:
    inputs = [tuple_msg(["ant", 0], tid="1"), tuple_msg(["ape", 0], tid="2")]
    bolt, msgs = drive(CountByFirstLetter, inputs, grouping={"type": "SHUFFLE"})
    assert emits(msgs) == [["ant", 1], ["ape", 2]]
    assert dict(bolt.keyed_state.items()) == {("a",): {"n": 2}}


def test_a_tuple_without_key_names_component_task_and_fix() -> None:
    with pytest.raises(StateKeyError, match=r"component 'count' task 3.*fields"):
        drive(Count, [tuple_msg(["a", 1], tid="1")], grouping={"type": "SHUFFLE"})


class PoisonedTotal(StatefulBolt):
    outputs = ["word", "total", "seen"]

    def process(self, tup):
        self.state["total"] = self.state.get("total", 0) + tup.values[1]
        self.state.setdefault("seen", []).append(tup.values[1])
        if tup.values[1] == 13:
            msg = "poison"
            raise ValueError(msg)
        self.emit([tup.values[0], self.state["total"], self.state["seen"]])


def test_a_tuple_that_raises_leaves_no_trace_in_the_state() -> None:
    inputs = [
        tuple_msg(["a", 1], tid="1"),
        tuple_msg(["a", 13], tid="2"),
        tuple_msg(["b", 13], tid="3"),
        tuple_msg(["a", 2], tid="4"),
    ]
    out = io.BytesIO()
    bolt = PoisonedTotal(input_stream=io.BytesIO(b"".join(inputs)), output_stream=out)
    fields = {"type": "FIELDS", "fields": ["word"]}
    bolt._setup_component({"topology.name": "t"}, context("count", fields))
    bolt.initialize({}, {})
    failures = 0
    for _ in inputs:
        try:
            bolt._run()
        except ValueError:
            failures += 1  # pystorm fails the tuple and goes on (run's loop)
    assert failures == 2
    # the scalar and the list mutated in place before the raise are both undone;
    # the key the failing tuple created is gone again
    assert dict(bolt.keyed_state.items()) == {("a",): {"total": 3, "seen": [1, 2]}}
    assert emits(messages(out))[-1] == ["a", 3, [1, 2]]


def test_state_outside_process_is_an_error() -> None:
    bolt, _ = drive(Count, [])
    with pytest.raises(StateKeyError, match="inside process"):
        bolt.state.get("n")


def test_restore_is_reported_and_barrier_forwarded_unanchored() -> None:
    barrier = tuple_msg(
        [7, {"offsets": {"lines/0": 4}}], tid="b", stream=BARRIER_STREAM
    )
    _bolt, msgs = drive(Count, [tuple_msg(["a", 1], tid="1"), barrier])
    restored = [m for m in msgs if m.get("command") == "metrics"]
    assert restored[0]["name"] == RESTORED_METRIC
    assert restored[0]["params"]["owner"] == "t/count/1"
    forwarded = [m for m in msgs if m.get("stream") == BARRIER_STREAM]
    assert forwarded == [
        {
            "command": "emit",
            "anchors": [],
            "stream": BARRIER_STREAM,
            "tuple": [7, {"owner": "t/count/1"}],
            "need_task_ids": False,
        }
    ]
    assert [m["id"] for m in msgs if m.get("command") == "ack"] == ["1"]
    snapshot = [m for m in msgs if m.get("name") == SNAPSHOT_METRIC]
    assert snapshot[0]["params"] == {"epoch": 7, "owner": "t/count/1", "bytes": 0}
    assert msgs.index(forwarded[0]) < msgs.index(snapshot[0])


def test_spout_seeks_then_emits_barriers_with_its_offset() -> None:
    commands = [
        JSON.encode({"command": "next", "id": ""}),
        JSON.encode({"command": "next", "id": ""}),
        JSON.encode({"command": BARRIER_COMMAND, "id": 5}),
    ]
    out = io.BytesIO()
    spout = Numbers(input_stream=io.BytesIO(b"".join(commands)), output_stream=out)
    ctx = context("numbers", None)
    spout._setup_component({"topology.name": "t"}, ctx)
    spout.initialize({}, ctx)
    for _ in commands:
        spout._run()
    msgs = messages(out)
    assert spout.sought == [None]
    assert emits(msgs) == [[0], [1]]
    assert emits(msgs, BARRIER_STREAM) == [[5, {"offset": 1, "spout": "numbers/1"}]]
    assert sum(m == {"command": "sync"} for m in msgs) == 3


class PystormBolt(Bolt):
    def process(self, tup):
        pass


class Plain(StatefulBolt, PystormBolt):
    pass


class PlainSpout(ReplayableSpout):
    def seek(self, offset):
        pass


def test_sr3_keeps_one_attribute_on_a_bolt_and_a_spout() -> None:
    # whatever a subclass names its attributes, ours are all behind ``_sr3``
    bolt, _ = drive(Plain, [tuple_msg(["a", 1], tid="1")])
    pystorm_bolt, _ = drive(PystormBolt, [tuple_msg(["a", 1], tid="1")])
    assert set(vars(bolt)) - set(vars(pystorm_bolt)) == {"_sr3"}
    spout = PlainSpout(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    pystorm_spout = Spout(input_stream=io.BytesIO(), output_stream=io.BytesIO())
    for task in (spout, pystorm_spout):
        task._setup_component({"topology.name": "t"}, context("numbers", None))
        task.initialize({}, {})
    assert set(vars(spout)) - set(vars(pystorm_spout)) == {"_sr3"}


class OwnNames(Count):
    def initialize(self, storm_conf, context):
        # names SR3 once kept on the instance are the user's to use
        self._sr3_owner = "mine"
        self._sr3_current = "mine"
        self._sr3_key_fields = {}
        self._sr3_ring = "mine"
        self._sr3_progress = "mine"


def test_a_bolt_may_name_its_attributes_as_sr3_once_did() -> None:
    barrier = tuple_msg([7, {}], tid="b", stream=BARRIER_STREAM)
    inputs = [tuple_msg(["a", 1], tid="1"), tuple_msg(["a", 1], tid="2"), barrier]
    bolt, msgs = drive(OwnNames, inputs)
    assert emits(msgs) == [["a", 1], ["a", 2]]
    assert emits(msgs, BARRIER_STREAM) == [[7, {"owner": "t/count/1"}]]
    assert dict(bolt.keyed_state.items()) == {("a",): {"n": 2}}
    assert bolt._sr3_owner == "mine"


def test_specs_declare_the_barrier_stream() -> None:
    class Topo(Topology):
        numbers = Numbers.spec(par=2)
        count = Count.spec(inputs={numbers: Grouping.fields("n")}, par=3)

    spout = Topo.thrift_spouts["numbers"]
    bolt = Topo.thrift_bolts["count"]
    assert set(spout.common.streams) == {"default", BARRIER_STREAM}
    assert spout.common.streams[BARRIER_STREAM].output_fields == ["epoch", "info"]
    assert set(bolt.common.streams) == {"default", BARRIER_STREAM}
    assert Numbers.sr3_stateful and Count.sr3_stateful


def test_the_public_classes_implement_the_engine_neutral_contract() -> None:
    # what the Spark engine asks of a user's class, without importing storm_bridge
    assert issubclass(Count, StatefulComponent)
    assert is_stateful_class(Count)
    assert not overrides_state_key(Count)
    assert overrides_state_key(CountByFirstLetter)
    assert issubclass(Numbers, ReplayableComponent)
    assert is_replayable_class(Numbers)
    assert not is_replayable_class(Count)


class Socket(ReplayableSpout):
    """A spout whose source goes away and comes back (``self.up``)."""

    def initialize(self, stormconf, context):
        self.up = False

    def seek(self, offset):
        pass

    def next_tuple(self):
        self.waiting_for_source(None if self.up else "socket 10.0.0.9:7 refused")


def waiting_reports(conf: dict[str, Any], ups: list[bool]) -> list[Any]:
    commands = [JSON.encode({"command": "next", "id": ""}) for _ in ups]
    out = io.BytesIO()
    spout = Socket(input_stream=io.BytesIO(b"".join(commands)), output_stream=out)
    ctx = context("numbers", None)
    spout._setup_component({"topology.name": "t", **conf}, ctx)
    spout.initialize({}, ctx)
    for up in ups:
        spout.up = up
        spout._run()
    return [
        m["params"]
        for m in messages(out)
        if m.get("command") == "metrics" and m.get("name") == WAITING_METRIC
    ]


def test_a_spout_says_when_its_source_goes_away_and_comes_back() -> None:
    # only the changes: --until-idle treats a waiting spout as not dry
    got = waiting_reports({LOCAL_CLUSTER_KEY: True}, [False, False, True, True, False])

    assert got == [
        {"reason": "socket 10.0.0.9:7 refused"},
        {"reason": None},
        {"reason": "socket 10.0.0.9:7 refused"},
    ]


def test_a_spout_off_the_local_cluster_sends_no_waiting_metric() -> None:
    # real Storm's ShellSpout dies on a metric no Java code registered
    assert waiting_reports({}, [False, True, False]) == []


class Finite(ReplayableSpout):
    """Two words, then the end of its input; ``rewind`` replays them."""

    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.position = 0
        self.rewind = False

    def seek(self, offset):
        self.position = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.rewind:
            self.rewind = False
            self.seek(None)
        if self.position >= 2:
            self.end_of_input()
            return
        self.emit(["w"], offset=self.position)
        self.position += 1


def finite_messages(conf: dict[str, Any], nexts: int, rewind_at: int) -> list[Any]:
    commands = [JSON.encode({"command": "next", "id": ""}) for _ in range(nexts)]
    out = io.BytesIO()
    spout = Finite(input_stream=io.BytesIO(b"".join(commands)), output_stream=out)
    ctx = context("words", None)
    spout._setup_component({"topology.name": "t", **conf}, ctx)
    spout.initialize({}, ctx)
    for n in range(nexts):
        spout.rewind = n == rewind_at
        spout._run()
    return [
        "emit" if m["command"] == "emit" else m["params"]
        for m in messages(out)
        if m["command"] == "emit"
        or (m["command"] == "metrics" and m["name"] == END_OF_INPUT_METRIC)
    ]


def test_a_spout_says_once_that_its_input_ended_and_again_after_a_replay() -> None:
    # --until-idle ends the run on it without the quiet period: said once per
    # end, and an emit after it (a rollback replaying) takes it back
    got = finite_messages({LOCAL_CLUSTER_KEY: True}, nexts=8, rewind_at=5)

    end = {"end": True}
    assert got == ["emit", "emit", end, "emit", "emit", end]


def test_a_spout_off_the_local_cluster_sends_no_end_of_input_metric() -> None:
    # real Storm's ShellSpout dies on a metric no Java code registered
    assert finite_messages({}, nexts=8, rewind_at=5) == ["emit"] * 4
