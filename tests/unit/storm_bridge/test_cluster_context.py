"""Task ids, handshake contexts and routing, as Storm computes them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from storm_bridge.cluster.context import (
    Router,
    RoutingError,
    assign_task_ids,
    back_edges,
    task_context,
)
from topology_api.java_hash import IntegerBoxing, fields_task_index
from topology_api.topology import LoadedTopology, load_topology

MIXED_CASE = """
from streamparse import Grouping, Topology
from {helpers} import CountBolt, WordSpout

class Names(Topology):
    Zeta = WordSpout.spec()
    alpha = CountBolt.spec(inputs=[Zeta], par=2)
"""


@pytest.fixture
def topology(write_topology: Callable[..., Path]) -> LoadedTopology:
    return load_topology(write_topology())


@pytest.fixture
def router(topology: LoadedTopology) -> Router:
    tasks = assign_task_ids(topology, acker_tasks=1)
    return Router(topology, tasks, rng=random.Random(1), boxing=IntegerBoxing.LONG)


def test_task_ids_follow_storm(topology: LoadedTopology) -> None:
    # Sorted component ids, the acker included, numbered from 1.
    assert assign_task_ids(topology, acker_tasks=1) == {
        1: "__acker",
        2: "count_bolt",
        3: "count_bolt",
        4: "count_bolt",
        5: "sink",
        6: "word_spout",
        7: "word_spout",
    }
    assert 1 not in assign_task_ids(topology, acker_tasks=0).values()


def test_java_string_order(write_topology: Callable[..., Path]) -> None:
    # Upper case sorts before '_' which sorts before lower case.
    names = load_topology(write_topology(MIXED_CASE))
    assert assign_task_ids(names, acker_tasks=2) == {
        1: "Zeta",
        2: "__acker",
        3: "__acker",
        4: "alpha",
        5: "alpha",
    }


def test_bolt_context(topology: LoadedTopology) -> None:
    tasks = assign_task_ids(topology, acker_tasks=1)
    context = task_context(topology, 3, tasks)
    assert context == {
        "task->component": {str(t): c for t, c in tasks.items()},
        "taskid": 3,
        "componentid": "count_bolt",
        "streams": ["default", "direct"],
        "stream->outputfields": {"default": ["word", "count"], "direct": ["word"]},
        "stream->target->grouping": {
            "direct": {"sink": {"type": "DIRECT"}},
            "default": {"sink": {"type": "ALL"}},
        },
        "source->stream->grouping": {
            "word_spout": {"default": {"type": "FIELDS", "fields": ["word"]}}
        },
        "source->stream->fields": {"word_spout": {"default": ["word"]}},
    }


def test_spout_context(topology: LoadedTopology) -> None:
    context = task_context(topology, 6, assign_task_ids(topology, acker_tasks=1))
    assert context["componentid"] == "word_spout"
    assert context["stream->target->grouping"] == {
        "default": {"count_bolt": {"type": "FIELDS", "fields": ["word"]}}
    }
    assert context["source->stream->grouping"] == {}


def test_fields_routing(router: Router) -> None:
    for word in ["the", "quick", "brown", "fox"]:
        index = fields_task_index([word], 3)
        assert router.targets(6, "default", [word]) == [[2, 3, 4][index]]


def test_all_and_direct_routing(router: Router) -> None:
    assert router.targets(2, "default", ["w", 1]) == [5]
    assert router.direct_targets(2, "direct", 5) == [5]
    assert router.direct_targets(2, "direct", 3) == []  # not a subscriber


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: r.targets(2, "nope", []), "Unknown stream ID: 'nope'"),
        (lambda r: r.targets(2, "direct", ["w"]), "regular emit to direct stream"),
        (lambda r: r.direct_targets(6, "default", 2), "expects a grouping"),
        (lambda r: r.targets(6, "default", []), "no value for grouping fields"),
        (lambda r: r.check_fields(6, "default", ["a", "b"]), "wrong number of fields"),
    ],
)
def test_routing_errors(
    router: Router, call: Callable[[Router], object], match: str
) -> None:
    with pytest.raises(RoutingError, match=match):
        call(router)


def test_groupers_reset_with_the_task(router: Router) -> None:
    picks = [router.targets(6, "default", [w]) for w in "abc"]
    router.reset_task(6)
    assert [router.targets(6, "default", [w]) for w in "abc"] == picks


CYCLE = """
from streamparse import Grouping, Topology
from streamparse.thrift import GlobalStreamId
from {helpers} import CountBolt, WordSpout

class Loop(Topology):
    words = WordSpout.spec()
    head = CountBolt.spec(
        inputs={{
            words: Grouping.SHUFFLE,
            GlobalStreamId(componentId="tail", streamId="default"): Grouping.SHUFFLE,
        }}
    )
    tail = CountBolt.spec(name="tail", inputs=[head])
    after = CountBolt.spec(inputs=[tail])
"""


def test_back_edges_are_the_subscriptions_that_close_a_cycle(
    write_topology: Callable[..., Path], topology: LoadedTopology
) -> None:
    assert back_edges(topology) == frozenset()
    loop = load_topology(write_topology(CYCLE))
    assert back_edges(loop) == {("tail", "head")}


PARTIAL = """
from streamparse import Topology
from storm_bridge import partial_key_grouping
from {helpers} import CountBolt, WordSpout

class Partial(Topology):
    word_spout = WordSpout.spec(par=2)
    count_bolt = CountBolt.spec(inputs={{word_spout: partial_key_grouping()}}, par=3)
"""


def test_partial_key_routing_per_sender(write_topology: Callable[..., Path]) -> None:
    topology = load_topology(write_topology(PARTIAL))
    tasks = assign_task_ids(topology, acker_tasks=1)
    assert [t for t, c in tasks.items() if c == "count_bolt"] == [2, 3, 4]
    router = Router(topology, tasks, rng=random.Random(1), boxing=IntegerBoxing.LONG)
    # Storm 2.8.3's choices over tasks 3, 4, 5 shifted to 2, 3, 4 (test_partial_key)
    words = [f"d{n}" for n in range(12)]
    expected = [[t - 1] for t in (5, 3, 4, 4, 5, 3, 4, 3, 5, 5, 4, 5)]
    assert [router.targets(5, "default", [w]) for w in words] == expected
    # each sender (spout task) balances on its own load counts
    assert [router.targets(6, "default", [w]) for w in words] == expected
    router.reset_task(5)
    assert [router.targets(5, "default", [w]) for w in words] == expected
