"""Plots of bench/recovery.py results: time to resume against size, per scenario."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.recovery_rows import MECHANISMS

BASELINES = ("raw-loopback", "raw-pretouched", "redis", "spark-hdfs", "spark-rocksdb")


def plots(rows: list[dict[str, Any]], results: Path) -> list[Path]:
    """One PNG per network, shape, epochs and failure count; the paths written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNGs")
        return []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["network"], r["shape"], r["epochs"])].append(r)
    written = []
    for (net, shape, epochs), sel in sorted(groups.items()):
        for failures in sorted(
            {r["failures"] for r in sel if r["mechanism"] in MECHANISMS}
        ):
            fig, ax = plt.subplots(figsize=(7, 4.5))
            lines = [
                m
                for m in (*MECHANISMS, "star-eager")
                if any(r["mechanism"] == m for r in sel)
            ]
            for m in lines:
                pts = sorted(
                    (r["size_bytes"] / 1e6, r["time_to_resume_s"])
                    for r in sel
                    if r["mechanism"] == m and r["failures"] == failures
                )
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=m)
            for m in BASELINES:
                pts = sorted(
                    (r["size_bytes"] / 1e6, r["time_to_resume_s"])
                    for r in sel
                    if r["mechanism"] == m
                )
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True), marker="s", linestyle="--", label=m
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("state size (MB)")
            ax.set_ylabel("time to resume (s)")
            title = f"{net}, {shape} values, {epochs} epoch(s), {failures} failure(s)"
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            path = results / f"recovery_{net}_{shape}_e{epochs}_f{failures}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
