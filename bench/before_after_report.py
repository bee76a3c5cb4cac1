"""The report of bench/backend_before_after.py: table, Markdown, plot and files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sr3_cli.output import table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NAME = "backend-before-after"


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 100 else f"{x:,.0f}"  # noqa: PLR2004 (digits vs thousands)


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        row["bench"],
        row["metric"],
        _fmt(row["before"]),
        _fmt(row["after"]),
        f"{row['ratio']:.3f}",
        f"±{row['band']:.3f}",
        row["verdict"],
    ]


HEADERS = ["bench", "metric", "before", "after", "after/before", "noise", "verdict"]


def markdown(r: dict[str, Any]) -> str:
    """The results as Markdown: the table, then how it was measured."""
    dirty = " (uncommitted changes)" if r["after_dirty"] else ""
    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
        *("| " + " | ".join(_cells(row)) + " |" for row in r["rows"]),
        "",
        f"Before: {r['before_commit'][:9]} (`--before {r['before_rev']}`); after: "
        f"{r['after_commit'][:9]}{dirty}."
        f" Medians of {r['repeats']} interleaved rounds; noise is the larger "
        "(max - min) / median of either side's rounds. Load average (1, 5, 15 min) "
        f"{_load(r['load_start'])} at the start, {_load(r['load_end'])} at the end, "
        f"{r['cores']} cores.",
    ]
    for bench, sides in r["options"].items():
        lines.append(f"- {bench}: `{' '.join(sides['after'])}`")
        for side, lost in r["dropped_options"][bench].items():
            if lost:
                lines.append(f"  - {side} does not know {', '.join(lost)}: dropped")
    for run in r["runs"]:
        if "error" in run:
            last = (run["error"].strip().splitlines() or ["no message"])[-1]
            lines.append(
                f"- round {run['round'] + 1}, {run['bench']}, {run['side']} "
                f"failed: {last}"
            )
    return "\n".join(lines) + "\n"


def _load(load: list[float]) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def plot(r: dict[str, Any], out: Path) -> None:
    """after/before per metric with each metric's noise band around 1."""
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (only when plotting)

    rows = r["rows"]
    labels = [f"{row['bench']}: {row['metric']}" for row in rows]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.5))
    ys = range(len(rows))
    colours = ["tab:green" if row["verdict"] == "within noise" else "tab:red"
               for row in rows]  # fmt: skip
    ax.barh(ys, [row["ratio"] - 1 for row in rows], left=1, color=colours)
    ax.errorbar([1] * len(rows), ys, xerr=[row["band"] for row in rows],
                fmt="none", ecolor="grey", capsize=3, label="noise band")  # fmt: skip
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("after / before (median); green: within noise")
    ax.set_title(
        f"issue 15 before ({r['before_commit'][:7]}) / after "
        f"({r['after_commit'][:7]}), {r['repeats']} rounds"
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write(r: dict[str, Any]) -> str:
    """Write the json, md and png results; return the console table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{NAME}.json").write_text(json.dumps(r, indent=1) + "\n")
    (RESULTS / f"{NAME}.md").write_text(markdown(r))
    plot(r, RESULTS / f"{NAME}.png")
    return table(HEADERS, [_cells(row) for row in r["rows"]])
