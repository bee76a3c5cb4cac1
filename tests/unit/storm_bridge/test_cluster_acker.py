"""The in-process acker: XOR tuple trees, failures, rotating expiry."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storm_bridge.cluster.acker import (
    Acker,
    AckOutcome,
    PendingInput,
    RotatingMap,
    TreeResult,
    new_edge_id,
    xor_anchors,
)


def test_rotating_map_lifetime() -> None:
    pending: RotatingMap[str, int] = RotatingMap(2)
    pending.put("a", 1)
    assert pending.rotate() == {}
    pending.put("b", 2)
    assert pending.rotate() == {"a": 1}
    assert pending.get("b") == 2
    pending.put("b", 3)  # renewed: back in the newest bucket
    assert pending.rotate() == {}
    assert len(pending) == 1
    assert pending.remove("b") == 3
    assert pending.remove("b") is None
    with pytest.raises(ValueError, match="at least 2 buckets"):
        RotatingMap(1)


def test_tree_completes_when_every_edge_is_acked() -> None:
    # spout -> t1 (edge e1); bolt acks t1 after emitting t2 (edge e2) anchored on
    # it; another bolt acks t2.
    acker = Acker()
    e1, e2 = 0x1111, 0x2222
    assert acker.init(root=9, value=e1, spout_task=4) is None
    assert acker.ack(9, e1 ^ e2) is None
    assert acker.ack(9, e2) == AckOutcome(9, 4, TreeResult.ACKED)
    assert len(acker) == 0


def test_acks_may_arrive_before_init() -> None:
    acker = Acker()
    assert acker.ack(5, 0xAB) is None  # no spout task known yet
    assert acker.init(5, 0xAB, 2) == AckOutcome(5, 2, TreeResult.ACKED)


def test_fail_wins() -> None:
    acker = Acker()
    acker.init(1, 0x5, 3)
    assert acker.fail(1) == AckOutcome(1, 3, TreeResult.FAILED)
    assert acker.ack(1, 0x5) is None  # a new, orphan entry: no spout task


def test_emit_without_targets_is_acked_at_init() -> None:
    assert Acker().init(7, 0, 1) == AckOutcome(7, 1, TreeResult.ACKED)


def test_rotation_forgets_silently() -> None:
    acker = Acker()
    acker.init(1, 0x5, 3)
    assert [acker.rotate() for _ in range(Acker.BUCKETS)] == [0, 0, 1]


@given(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=6))
def test_any_tree_shape_completes(fanouts: list[int]) -> None:
    """The spout emits to ``fanouts[0]`` tasks; each level re-emits, anchored."""
    rng = random.Random(len(fanouts))
    acker = Acker()
    root = new_edge_id(rng)
    level = []
    init = 0
    for _ in range(fanouts[0]):
        edge = new_edge_id(rng)
        init ^= edge
        level.append(PendingInput({root: edge}, "spout", "default", []))
    outcomes = [acker.init(root, init, 1)]
    for fanout in fanouts[1:]:
        children = []
        for parent in level:
            children += [
                PendingInput(xor_anchors([parent], rng), "b", "default", [])
                for _ in range(fanout)
            ]
            edge = parent.anchors[root]
            outcomes.append(acker.ack(root, edge ^ parent.ack_value))
        level = children
    for leaf in level:
        outcomes.append(acker.ack(root, leaf.anchors[root] ^ leaf.ack_value))
    done = [o for o in outcomes if o is not None]
    assert done == [AckOutcome(root, 1, TreeResult.ACKED)]
    assert outcomes[-1] is not None


def test_unanchored_parents_add_nothing() -> None:
    rng = random.Random(0)
    tick = PendingInput({}, "__system", "__tick", [1])
    assert xor_anchors([tick], rng) == {}
    assert tick.ack_value == 0
