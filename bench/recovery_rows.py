"""Rows of bench/recovery.py: their scenario, medians of rounds, progress lines.

Every row a recovery run measures carries its scenario's fields (network, value
shape, size, epochs); a failure-free cell is the median of rounds in which the
structures and the raw copies take turns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.cpu import cores
from sr3.synthetic import SyntheticSpec

#: The recovery structures compared, as rows name them.
MECHANISMS = ("star", "line", "tree")


def spec_for(size: int, shape: str) -> SyntheticSpec:
    value = 1024 if shape == "small" else 1024 * 1024
    return SyntheticSpec(total_bytes=size, keys=max(1, size // value), seed=42)


def scenario(
    shape: str, label: str, spec: SyntheticSpec, epochs: int
) -> dict[str, Any]:
    """The fields naming a loopback scenario in every row of it."""
    return {
        "network": "loopback",
        "shape": shape,
        "size": label,
        "size_bytes": spec.total_bytes,
        "keys": spec.keys,
        "epochs": epochs,
        "cores": cores(),
    }


def interleaved(
    times: int,
    runs: dict[str, Callable[[], dict[str, Any]]],
    *,
    after: Callable[[], None] = lambda: None,
) -> list[dict[str, Any]]:
    """Run each of ``runs`` ``times`` times, taking turns; return median rows."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for _ in range(times):
        for name, run in runs.items():
            try:
                got[name].append(run())
            finally:
                after()
    return [_median(samples) for samples in got.values() if samples]


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The median sample's row, with every sample's time under ``samples_s``."""
    ordered = sorted(samples, key=lambda r: float(r["time_to_resume_s"]))
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["samples_s"] = [round(float(r["time_to_resume_s"]), 4) for r in ordered]
    return row


def median_of(
    times: int,
    run: Callable[[], dict[str, Any]],
    *,
    after: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Run ``times`` times; return the median run's row with every sample."""
    return interleaved(times, {"run": run}, after=after)[0]


def show_row(row: dict[str, Any]) -> None:
    """Print one row's progress line: scenario, structure, failures, resume time."""
    extra = f" chose={row['chosen']}" if row["mechanism"] == "auto" else ""
    if row.get("failures"):
        extra += f" killed={row.get('killed')} replans={row.get('replans')}"
    print(
        f"[{row['network']}/{row['shape']}/{row['size']}/e{row['epochs']}] "
        f"{row['mechanism']:<14} f={row['failures']} "
        f"resume {row['time_to_resume_s']:.3f}s{extra}",
        flush=True,
    )
