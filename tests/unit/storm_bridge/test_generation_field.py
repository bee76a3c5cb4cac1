"""The hidden generation field: appended to emits, stripped from tuples.

The serializer is driven with pystorm's own JSON serializer over in-memory
streams; a plain streamparse bolt (word count's ``Split``) runs as Storm starts
it, a ``python`` subprocess fed the multilang protocol on its stdin.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pystorm.serializers.json_serializer import JSONSerializer

from storm_bridge import generation_field
from storm_bridge.generation_field import (
    GenerationFieldSerializer,
    carries_generation,
    launch_script,
    warmup_emit,
)
from storm_bridge.lineage import derive
from storm_bridge.messages import (
    GENERATION_FIELD_KEY,
    GENERATION_KEY,
    HIDDEN_GENERATION_FIELD,
    LINEAGE_KEY,
)
from storm_bridge.sparse.submit import python_components
from topology_api.barriers import BARRIER_STREAM, WARMUP_STREAM
from topology_api.topology import load_topology

REPO = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
G = HIDDEN_GENERATION_FIELD

CONTEXT = {
    "taskid": 3,
    "componentid": "split",
    "source->stream->fields": {
        "lines": {"default": ["line", G], WARMUP_STREAM: ["generation"]},
        "java": {"default": ["line"]},
        "count": {WARMUP_STREAM: ["generation"]},
    },
}


def _wire(*messages: Any) -> str:
    return "".join(f"{json.dumps(m)}\nend\n" for m in messages)


def _serializer(
    *messages: Any, on: bool = True, scope: str = "task"
) -> tuple[Any, Any]:
    conf = {GENERATION_FIELD_KEY: True, "sr3.recovery.scope": scope} if on else {}
    context = json.loads(json.dumps(CONTEXT))
    handshake = {"conf": conf, "context": context, "pidDir": "/nonexistent"}
    wire_in = io.BytesIO(_wire(handshake, *messages).encode())
    inner = JSONSerializer(wire_in, io.BytesIO(), _Lock(), _Lock())
    wrapped = GenerationFieldSerializer(inner)
    wrapped.read_message()
    return wrapped, inner.output_stream


class _Lock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _sent(out: Any) -> list[Any]:
    if not isinstance(out, str):
        out.flush()
    text = out if isinstance(out, str) else out.buffer.getvalue().decode()
    return [json.loads(m) for m in text.split("\nend\n") if m.strip()]


def _tuple(tuple_id: str, comp: str, values: list[Any]) -> dict[str, Any]:
    return {
        "id": tuple_id,
        "comp": comp,
        "stream": "default",
        "task": 1,
        "tuple": values,
    }


def test_a_tuple_from_a_stream_with_the_field_loses_it_and_keeps_its_generation() -> (
    None
):
    wrapped, _out = _serializer(_tuple("t1", "lines", ["a b", 4]))
    message = wrapped.read_message()
    assert message["tuple"] == ["a b"]
    assert message[GENERATION_KEY] == 4


def test_the_context_lists_the_sources_fields_without_the_hidden_one() -> None:
    handshake = {
        "conf": {GENERATION_FIELD_KEY: True},
        "context": json.loads(json.dumps(CONTEXT)),
        "pidDir": "/nonexistent",
    }
    inner = JSONSerializer(
        io.BytesIO(_wire(handshake).encode()), io.BytesIO(), _Lock(), _Lock()
    )
    read = GenerationFieldSerializer(inner).read_message()
    fields = read["context"]["source->stream->fields"]
    assert fields == {"lines": {"default": ["line"]}, "java": {"default": ["line"]}}


def test_a_tuple_from_a_stream_without_the_field_is_untouched() -> None:
    wrapped, _out = _serializer(_tuple("t1", "java", ["a b"]))
    message = wrapped.read_message()
    assert message["tuple"] == ["a b"]
    assert GENERATION_KEY not in message


def test_a_null_generation_is_stripped_and_leaves_the_tuple_untagged() -> None:
    wrapped, _out = _serializer(_tuple("t1", "lines", ["a b", None]))
    message = wrapped.read_message()
    assert message["tuple"] == ["a b"]
    assert GENERATION_KEY not in message


def test_a_bolt_emit_carries_the_newest_generation_of_its_anchors() -> None:
    wrapped, out = _serializer(
        _tuple("t1", "lines", ["a", 2]), _tuple("t2", "lines", ["b", 5])
    )
    wrapped.read_message()
    wrapped.read_message()
    wrapped.send_message({"command": "emit", "tuple": ["x"], "anchors": ["t1", "t2"]})
    wrapped.send_message({"command": "emit", "tuple": ["y"], "anchors": ["t1"]})
    wrapped.send_message({"command": "emit", "tuple": ["z"]})
    wrapped.send_message({"command": "ack", "id": "t1"})
    # an acked tuple's generation is forgotten
    wrapped.send_message({"command": "emit", "tuple": ["w"], "anchors": ["t1"]})
    emits = [m["tuple"] for m in _sent(out) if m["command"] == "emit"]
    assert emits == [["x", 5], ["y", 2], ["z", None], ["w", None]]


def test_a_bolt_that_never_acks_keeps_only_the_newest_generations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Storm times out its trees; the wrapper must not remember them forever
    monkeypatch.setattr(generation_field, "PENDING_MAX", 2)
    wrapped, out = _serializer(
        _tuple("t1", "lines", ["a", 1]),
        _tuple("t2", "lines", ["b", 2]),
        _tuple("t3", "lines", ["c", 3]),
    )
    for _ in range(3):
        wrapped.read_message()
    for anchor in ("t1", "t2", "t3"):
        wrapped.send_message({"command": "emit", "tuple": ["x"], "anchors": [anchor]})
    emits = [m["tuple"] for m in _sent(out) if m["command"] == "emit"]
    # the oldest is forgotten: its emit falls back to null (the quiet-time fence)
    assert emits == [["x", None], ["x", 2], ["x", 3]]


def test_a_spout_emit_moves_its_generation_key_into_the_field() -> None:
    wrapped, out = _serializer()
    wrapped.send_message({"command": "emit", "tuple": ["l"], GENERATION_KEY: 3})
    wrapped.send_message(
        {"command": "emit", "tuple": [1, {}], "stream": BARRIER_STREAM}
    )
    sent = _sent(out)
    assert sent[0]["tuple"] == ["l", 3]
    assert GENERATION_KEY not in sent[0]
    assert sent[1]["tuple"] == [1, {}]


def test_a_spout_emit_carries_its_lineage_beside_its_generation_as_text() -> None:
    wrapped, out = _serializer()
    message = {"command": "emit", "tuple": ["l"], GENERATION_KEY: 3, LINEAGE_KEY: 77}
    wrapped.send_message(message)
    sent = _sent(out)[0]
    assert sent["tuple"] == ["l", "3:77"]  # text: every Storm serializer passes it
    assert LINEAGE_KEY not in sent


def test_a_bolt_emit_derives_its_lineage_from_its_anchors_and_its_position() -> None:
    wrapped, out = _serializer(
        _tuple("t1", "lines", ["a b", "2:41"]), _tuple("t2", "lines", ["c", ":42"])
    )
    first = wrapped.read_message()
    assert (first["tuple"], first[GENERATION_KEY], first[LINEAGE_KEY]) == (
        ["a b"],
        2,
        41,
    )
    second = wrapped.read_message()
    assert GENERATION_KEY not in second
    assert second[LINEAGE_KEY] == 42
    emits = [
        {"command": "emit", "tuple": ["a"], "anchors": ["t1"]},
        {"command": "emit", "tuple": ["b"], "anchors": ["t1"]},
        {"command": "emit", "tuple": ["j"], "anchors": ["t2", "t1"]},
        # a stateful task emitting again what it emitted before names it
        {"command": "emit", "tuple": ["a"], "anchors": ["t2"], LINEAGE_KEY: 5},
        {"command": "emit", "tuple": ["u"]},
    ]
    for message in emits:
        wrapped.send_message(message)
    expected = [derive([41], 0), derive([41], 1), derive([42, 41], 0), 5, None]
    # the caller's message keeps the lineage its emit got
    assert [m[LINEAGE_KEY] for m in emits] == expected
    tags = [m["tuple"][-1] for m in _sent(out)]
    assert tags == [
        f"2:{expected[0]}",
        f"2:{expected[1]}",
        f"2:{expected[2]}",
        ":5",  # anchored on t2 alone, which carried no generation
        None,
    ]
    wrapped.send_message({"command": "ack", "id": "t1"})
    wrapped.send_message({"command": "emit", "tuple": ["late"], "anchors": ["t1"]})
    assert _sent(out)[-1]["tuple"] == ["late", None]  # forgotten once acked


def test_under_global_scope_bolt_emits_carry_no_lineage() -> None:
    # nothing reads them there: the hashing is left out
    wrapped, out = _serializer(_tuple("t1", "lines", ["a b", "2:41"]), scope="global")
    assert wrapped.read_message()[LINEAGE_KEY] == 41
    wrapped.send_message({"command": "emit", "tuple": ["a"], "anchors": ["t1"]})
    assert _sent(out)[0]["tuple"] == ["a", 2]


def test_without_the_conf_key_messages_pass_through() -> None:
    wrapped, out = _serializer(_tuple("t1", "lines", ["a b", 4]), on=False)
    assert wrapped.read_message()["tuple"] == ["a b", 4]
    wrapped.send_message({"command": "emit", "tuple": ["a"], "anchors": ["t1"]})
    assert _sent(out)[0]["tuple"] == ["a"]


def _warmup(tuple_id: str, comp: str, generation: int) -> dict[str, Any]:
    return {**_tuple(tuple_id, comp, [generation]), "stream": WARMUP_STREAM}


def test_a_warmup_is_acked_relayed_once_per_generation_and_never_reaches_the_bolt() -> (
    None
):
    wrapped, out = _serializer(
        _warmup("w1", "lines", 2),
        _warmup("w2", "count", 2),
        _tuple("t1", "lines", ["a b", 2]),
        _warmup("w3", "lines", 1),
        _warmup("w4", "count", 3),
        _tuple("t2", "lines", ["c", 3]),
    )
    assert wrapped.read_message()["tuple"] == ["a b"]
    assert _sent(out) == [
        {"command": "ack", "id": "w1"},
        warmup_emit(2),
        {"command": "ack", "id": "w2"},
    ]
    assert wrapped.read_message()["tuple"] == ["c"]
    assert _sent(out)[3:] == [
        {"command": "ack", "id": "w3"},
        {"command": "ack", "id": "w4"},
        warmup_emit(3),
    ]
    assert warmup_emit(3)["stream"] == WARMUP_STREAM
    assert warmup_emit(3)["need_task_ids"] is False  # Storm writes no task ids back


def test_the_context_lists_no_warmup_stream() -> None:
    context = json.loads(json.dumps(CONTEXT))
    handshake = {"conf": {GENERATION_FIELD_KEY: True}, "context": context}
    inner = JSONSerializer(
        io.BytesIO(_wire(handshake).encode()), io.BytesIO(), _Lock(), _Lock()
    )
    seen = GenerationFieldSerializer(inner).read_message()["context"]
    assert seen["source->stream->fields"] == {
        "lines": {"default": ["line"]},
        "java": {"default": ["line"]},
    }


def test_without_the_conf_key_a_warmup_stream_tuple_passes_through() -> None:
    wrapped, out = _serializer(_warmup("w1", "lines", 2), on=False)
    assert wrapped.read_message()["stream"] == WARMUP_STREAM
    assert _sent(out) == []


def test_submit_declares_the_field_on_python_streams_but_not_the_barrier() -> None:
    topology = load_topology(WORDCOUNT)
    run = Path(sys.prefix) / "bin" / "streamparse_run"
    changed = python_components(
        topology, run=run, serializer="json", generation_field=True
    )
    assert sorted(changed) == ["count", "lines", "split"]
    cls: Any = topology.topology_class
    lines = cls.thrift_spouts["lines"]
    streams = lines.common.streams
    assert streams["default"].output_fields == ["line", G]
    assert streams[BARRIER_STREAM].output_fields[-1] != G
    assert cls.thrift_bolts["count"].common.streams["default"].output_fields == [
        "word",
        "count",
        G,
    ]
    shell = lines.spout_object.shell
    assert shell.execution_command == str(run.parent / "python")
    assert shell.script == launch_script("json", "wordcount.Lines")
    assert not carries_generation("__tick")
    # the same loaded topology submitted again without the field loses it
    python_components(topology, run=run, serializer="json", generation_field=False)
    streams = lines.common.streams
    assert streams["default"].output_fields == ["line"]
    assert shell.execution_command == str(run)
    assert shell.script == "-s json wordcount.Lines"


def _warmup_sources(cls: Any, bolt: str) -> dict[str, Any]:
    inputs = cls.thrift_bolts[bolt].common.inputs
    return {k.componentId: g for k, g in inputs.items() if k.streamId == WARMUP_STREAM}


def test_submit_wires_the_warmup_from_every_python_component_to_every_python_bolt() -> (
    None
):
    topology = load_topology(WORDCOUNT)
    cls: Any = topology.topology_class
    before = {spec.name: set(spec.inputs or {}) for spec in cls.specs}
    run = Path(sys.prefix) / "bin" / "streamparse_run"
    python_components(topology, run=run, serializer="json", generation_field=True)
    for bolt in ("split", "count"):
        sources = _warmup_sources(cls, bolt)
        assert sorted(sources) == ["count", "lines", "split"]
        assert all(g.all is not None for g in sources.values())
    for name in ("lines", "split", "count"):
        spout = cls.thrift_spouts.get(name)
        common = (spout or cls.thrift_bolts[name]).common
        assert common.streams[WARMUP_STREAM].output_fields == ["generation"]
    # the user's subscriptions are untouched, and the topology's own model too
    assert [k.streamId for k in cls.thrift_bolts["split"].common.inputs] == [
        "default",
        WARMUP_STREAM,
        WARMUP_STREAM,
        WARMUP_STREAM,
    ]
    assert all(
        sub.stream != WARMUP_STREAM
        for comp in topology.components.values()
        for sub in comp.inputs
    )
    assert {spec.name: set(spec.inputs or {}) for spec in cls.specs} == before
    # submitted again without the field: no warm-up is left
    python_components(topology, run=run, serializer="json", generation_field=False)
    assert _warmup_sources(cls, "split") == {}
    assert WARMUP_STREAM not in cls.thrift_spouts["lines"].common.streams


#: How Storm starts a Python component: ``sr3 run``'s ``python -c`` script, and
#: ``sparse submit``'s console script (its entry point, run the same way) with
#: the one argument streamparse builds.
LAUNCHES = {
    "sr3 run": [launch_script("json", "wordcount.Split")],
    "sparse submit": [
        "-cfrom storm_bridge.generation_field import cli; cli()",
        "-s json wordcount.Split",
    ],
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_a_plain_streamparse_bolt_run_as_storm_starts_it_passes_the_generation_on(
    tmp_path: Path, launch: str
) -> None:
    context = {
        "taskid": 3,
        "componentid": "split",
        "task->component": {"3": "split"},
        "source->stream->fields": {"lines": {"default": ["line", G]}},
    }
    conf = {GENERATION_FIELD_KEY: True, "topology.name": "wordcount"}
    handshake = {"conf": conf, "context": context, "pidDir": str(tmp_path)}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(WORDCOUNT.parent)]),
    }
    proc = subprocess.run(  # noqa: S603 (our interpreter, our module)
        [sys.executable, *LAUNCHES[launch]],
        input=_wire(handshake, _tuple("t1", "lines", ["apple pear", 7])),
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        check=False,
    )  # fmt: skip
    sent = _sent(proc.stdout)
    emits = [m for m in sent if m.get("command") == "emit"]
    assert [m["tuple"] for m in emits] == [["apple", 7], ["pear", 7]], proc.stderr
    assert all(m["anchors"] == ["t1"] for m in emits)
    assert {"command": "ack", "id": "t1"} in sent
