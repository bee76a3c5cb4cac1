"""Latency percentiles and the bounded sample behind them."""

from __future__ import annotations

from sr3.latency import LatencySample, percentiles


def test_percentiles_are_nearest_rank_and_none_without_values() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100 ms
    assert percentiles(values) == {"p50": 51.0, "p90": 91.0, "p99": 100.0, "max": 100.0}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "max": None}


def test_a_sample_keeps_every_value_until_full() -> None:
    sample = LatencySample(size=100)
    for v in range(1, 101):
        sample.add(float(v))
    assert sample.summary() == {
        "p50": 51.0, "p90": 91.0, "p99": 100.0, "max": 100.0, "count": 100,
    }  # fmt: skip


def test_a_long_run_is_sampled_uniformly_with_the_exact_max_and_count() -> None:
    sample = LatencySample(size=500, seed=3)
    for v in range(100_000):  # 0..99,999 ms, in rising order
        sample.add(float(v))
    summary = sample.summary()
    assert summary["count"] == 100_000
    assert summary["max"] == 99_999.0
    # a sample of the whole run, not its first or last 500 values
    p50, p90 = summary["p50"], summary["p90"]
    assert p50 is not None and 40_000 <= p50 <= 60_000
    assert p90 is not None and 85_000 <= p90 <= 95_000
    assert LatencySample().summary()["count"] == 0
