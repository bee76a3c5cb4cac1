"""pystorm's run loop taken step by step, as the Spark engine hosts a component."""

from __future__ import annotations

import io
from typing import Any

from pystorm.bolt import BatchingBolt

from storm_bridge.multilang import get_serializer
from topology_api.pystorm_steps import PystormSteps

JSON = get_serializer("json")

CONTEXT = {
    "task->component": {"1": "words", "2": "sums"},
    "taskid": 2,
    "componentid": "sums",
    "source->stream->fields": {"words": {"default": ["word", "n"]}},
}


class SumBatch(BatchingBolt):
    def group_key(self, tup: Any) -> Any:
        return tup.values[0]

    def process_batch(self, key: Any, tups: Any) -> None:
        self.emit([key, sum(t.values[1] for t in tups)])


def tuple_msg(tid: str, word: str, n: int) -> bytes:
    message = {"id": tid, "comp": "words", "stream": "default", "task": 1}
    return JSON.encode({**message, "tuple": [word, n]})


def test_a_batching_bolt_batches_then_emits_anchored_to_its_batch() -> None:
    inputs = [tuple_msg("1", "a", 1), tuple_msg("2", "b", 5), tuple_msg("3", "a", 2)]
    out = io.BytesIO()
    bolt = SumBatch(input_stream=io.BytesIO(b"".join(inputs)), output_stream=out)
    steps = PystormSteps(bolt)
    steps.setup({"topology.name": "t"}, CONTEXT)
    # the values of a source's stream arrive as a namedtuple of its fields
    assert steps.source_tuple_types()["words"]["default"]._fields == ("word", "n")
    for _ in inputs:
        steps.run_step()
    batches = steps.take_batches()
    assert {key: [t.id for t in tups] for key, tups in batches.items()} == {
        "a": ["1", "3"],
        "b": ["2"],
    }
    assert steps.take_batches() == {}  # taken once
    for key, tups in batches.items():
        with steps.batch_anchored(key, tups):
            bolt.process_batch(key, tups)
    out.seek(0)
    emits = [
        (m["tuple"], m["anchors"])
        for m in JSON.iter_messages(out, component="sums", task_id=2)
        if m.get("command") == "emit"
    ]
    assert emits == [(["a", 3], ["1", "3"]), (["b", 5], ["2"])]
