"""Noise verdicts of bench/backend_before_after.py: each metric, before and after.

Each side's spread is (max - min) / median of its repeats; a metric is "within
noise" when |after/before - 1| is at most the larger of the two spreads.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.before_after_benches import Bench


def spread(samples: list[float]) -> float:
    """(max - min) / median of ``samples``: 0 for fewer than two."""
    if len(samples) < 2:  # noqa: PLR2004 (a spread needs two)
        return 0.0
    return (max(samples) - min(samples)) / statistics.median(samples)


def verdict(before: list[float], after: list[float], better: str) -> dict[str, Any]:
    """Compare two sides' repeats: medians, ratio, noise band and the verdict.

    The band is the larger relative spread of either side's repeats; the
    change is noise when |after/before - 1| is inside it.
    """
    b, a = statistics.median(before), statistics.median(after)
    ratio = a / b
    band = max(spread(before), spread(after))
    if min(len(before), len(after)) < 2:  # noqa: PLR2004 (a spread needs two)
        text = "no verdict (1 repeat)"
    elif abs(ratio - 1) <= band:
        text = "within noise"
    elif not better:
        text = "changed beyond noise"
    else:
        improved = ratio > 1 if better == "higher" else ratio < 1
        text = "better beyond noise" if improved else "worse beyond noise"
    return {
        "before": b,
        "after": a,
        "ratio": ratio,
        "band": band,
        "verdict": text,
    }


def summarize(runs: list[dict[str, Any]], benches: list[Bench]) -> list[dict[str, Any]]:
    """One row per metric: both sides' samples, medians, ratio and verdict."""
    rows = []
    for bench in benches:
        for metric in bench.metrics:
            samples = {
                side: [
                    r["metrics"][metric.name]
                    for r in runs
                    if r["bench"] == bench.name
                    and r["side"] == side
                    and metric.name in r["metrics"]
                ]
                for side in ("before", "after")
            }
            if not samples["before"] or not samples["after"]:
                continue
            rows.append(
                {
                    "bench": bench.name,
                    "metric": metric.name,
                    "unit": metric.unit,
                    "better": metric.better,
                    "before_samples": samples["before"],
                    "after_samples": samples["after"],
                    **verdict(samples["before"], samples["after"], metric.better),
                }
            )
    return rows
