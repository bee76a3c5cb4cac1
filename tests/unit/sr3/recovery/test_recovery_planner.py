"""The planner is a pure, deterministic function with readable reasons."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sr3.errors import ConfigError
from sr3.recovery.planner import PlannerInputs, ProbeResult, plan_mechanism

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
