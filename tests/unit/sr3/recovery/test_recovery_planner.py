"""The planner is a pure, deterministic function with readable reasons."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sr3.config import NodeConfig
from sr3.errors import ConfigError
from sr3.manifest import ShardMeta
from sr3.ports import NodeInfo
from sr3.recovery.base import RecoveryContext
from sr3.recovery.planner import PlannerInputs, ProbeResult, plan_mechanism
from sr3.recovery.transfer_plan import planner_inputs

MB = 1_000_000

LOOPBACK = PlannerInputs(
    state_bytes=100 * MB,
    merged_bytes=100 * MB,
    shard_count=25,
    holder_count=5,
    chain_length=1,
    rtt_s=0.0001,
    holder_bps=900 * MB,
    aggregate_bps=2000 * MB,
    probed=True,
)
# R behind a 100 Mbit/s, 20 ms link: one stream or five, R's link is the limit
NARROW = replace(
    LOOPBACK,
    rtt_s=0.02,
    holder_bps=12 * MB,
    aggregate_bps=12.5 * MB,
)


def test_configured_mechanism_wins_and_says_so() -> None:
    for m in ("star", "line", "tree"):
        got = plan_mechanism(replace(LOOPBACK, configured=m))
        assert got.mechanism == m
        assert f"sr3.recovery.mechanism={m}" in got.reason


def test_unknown_mechanism_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="star, line, tree or auto"):
        replace(LOOPBACK, configured="ring")


def test_star_on_ample_bandwidth_and_for_small_state() -> None:
    assert plan_mechanism(LOOPBACK).mechanism == "star"
    small = plan_mechanism(replace(NARROW, state_bytes=500_000, merged_bytes=500_000))
    assert small.mechanism == "star" and "small state" in small.reason
    assert plan_mechanism(replace(NARROW, holder_count=1)).mechanism == "star"


def test_tree_when_a_long_delta_chain_meets_a_narrow_link() -> None:
    long_chain = replace(NARROW, state_bytes=275 * MB, chain_length=8)
    got = plan_mechanism(long_chain)
    assert got.mechanism == "tree"
    assert got.predicted_s["tree"] < got.predicted_s["star"]
    assert "tree is predicted fastest" in got.reason and "8 epoch(s)" in got.reason


def test_latency_target_prefers_the_gentlest_structure_that_meets_it() -> None:
    got = plan_mechanism(replace(NARROW, latency_target_s=60.0))
    assert got.mechanism == "line"
    assert "meets the 60s target" in got.reason
    missed = plan_mechanism(replace(NARROW, latency_target_s=0.01))
    assert "none meets" in missed.reason
    assert missed.mechanism == min(
        missed.predicted_s, key=missed.predicted_s.__getitem__
    )


@settings(max_examples=50, deadline=None)
@given(
    size=st.integers(1, 10**10),
    holders=st.integers(1, 12),
    chain=st.integers(1, 20),
    rtt=st.floats(1e-5, 0.2),
    bps=st.floats(1e5, 1e10),
    target=st.none() | st.floats(0.001, 100),
)
def test_deterministic_for_fixed_inputs(
    size: int, holders: int, chain: int, rtt: float, bps: float, target: float | None
) -> None:
    inputs = PlannerInputs(
        state_bytes=size,
        merged_bytes=max(1, size // chain),
        shard_count=max(1, size // (4 * MB)),
        holder_count=holders,
        chain_length=chain,
        rtt_s=rtt,
        holder_bps=bps,
        latency_target_s=target,
    )
    first = plan_mechanism(inputs)
    assert first == plan_mechanism(replace(inputs))
    assert first.mechanism in ("star", "line", "tree")
    assert first.reason.startswith("auto: ")


def test_probe_result_medians_and_defaults() -> None:
    probes = ProbeResult(
        {"a": 0.001, "b": 0.003, "c": 0.002}, {"a": 1.0, "b": 3.0}, 5.0
    )
    assert probes.median_rtt_s() == 0.002 and probes.median_bps() == 2.0
    empty = ProbeResult({}, {}, None)
    assert empty.median_rtt_s() > 0 and empty.median_bps() > 0


def test_relays_are_costed_over_the_covering_holders_only() -> None:
    # 12 holders but 3 cover every shard: the chain has 3 hops, the tree 2 levels
    far = replace(NARROW, holder_count=12, rtt_s=0.05)
    every = plan_mechanism(replace(far, configured="auto"))
    cover = plan_mechanism(replace(far, relay_holders=3))
    rtt = far.rtt_s
    assert every.predicted_s["line"] - cover.predicted_s["line"] == pytest.approx(
        3 * 9 * rtt
    )
    # fanout 2: 12 nodes need 4 levels, 3 nodes 2
    assert every.predicted_s["tree"] - cover.predicted_s["tree"] == pytest.approx(
        3 * 2 * rtt
    )
    assert every.predicted_s["star"] == cover.predicted_s["star"]
    assert "(3 cover all)" in cover.reason and "cover all" not in every.reason
    # more covering holders than holders is meaningless: capped
    assert plan_mechanism(replace(far, relay_holders=40)).predicted_s == (
        every.predicted_s
    )


def test_relay_holders_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="relay_holders"):
        replace(LOOPBACK, relay_holders=0)


def test_inputs_count_the_holders_that_cover_every_shard() -> None:
    # every shard on a and b, and on one of c, d, e
    others = ["c", "d", "e"]
    shards = [
        ShardMeta(f"o@1#{i}", "o", 1, 1000, 0, (i,), "full", ("a", "b", others[i % 3]))
        for i in range(9)
    ]
    live = {n: NodeInfo(n, "127.0.0.1", 1) for n in ["a", "b", *others]}
    context = RecoveryContext(
        manifests=None,  # type: ignore[arg-type]  # planner_inputs reads config only
        members=lambda: live,
        pool=None,  # type: ignore[arg-type]  # likewise unused
        node_config=NodeConfig(),
    )
    inputs = planner_inputs(shards, live, context, configured="auto")
    assert inputs.holder_count == 5
    assert inputs.relay_holders == 1  # a alone holds every shard
    del live["a"]
    inputs = planner_inputs(shards, live, context, configured="auto")
    assert (inputs.holder_count, inputs.relay_holders) == (4, 1)
    del live["b"]
    inputs = planner_inputs(shards, live, context, configured="auto")
    assert (inputs.holder_count, inputs.relay_holders) == (3, 3)
