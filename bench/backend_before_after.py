"""Issue 15's before/after: recovery, checkpoint overhead and the Spark engine.

Issue 15 (one state backend layer, the neutral topology API, the bolt's state in
one handle) must leave behaviour unchanged: "the recovery, checkpoint-overhead
and Spark-engine benchmarks stay within noise of today's figures (print
before/after in one run)". This runs the three existing benchmarks, at small
sizes, in two trees in one run:

* before: the last commit before the issue-15 work (``BASELINE``, or
  ``--before REV``), checked out as a detached git worktree under
  ``.cache/bench-before/`` (git-ignored; reused when present);
* after: this tree.

Both use the same interpreter (this script's), each with ``PYTHONPATH`` and the
working directory set to its own tree. Runs are interleaved: each of
``--repeats`` rounds runs every benchmark in both trees, before first in even
rounds and after first in odd ones, so that load from elsewhere reaches both.
Each benchmark's own machine-readable output is read (``recovery.json``,
``storm_checkpoint.py --json``, ``spark_engine.json``); the result files a run
writes into a tree's ``bench/results/`` are put back as they were afterwards.
Options a revision's benchmark does not know (read from its ``--help``) are
dropped for that revision and the results say so.

Noise: for each metric, each side's spread is (max - min) / median of its
repeats; a metric is "within noise" when |after/before - 1| is at most the
larger of the two spreads. With one repeat there is no spread and no verdict.

    .venv/bin/python bench/backend_before_after.py --repeats 2

Writes ``bench/results/backend-before-after.{json,md,png}``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sr3_cli.output import table  # noqa: E402 (after the sys.path insert above)

RESULTS = ROOT / "bench" / "results"
NAME = "backend-before-after"
#: The parent of the first issue-15 commit (9efb05c, "fields grouping sends each
#: value where Storm 2.8.3's own FieldsGrouper does", the issue's first "must
#: show" item), which was followed by the config table (79ac0a2) and the backend
#: layer (8cd3843). bccac1e is the last commit of the session that filed issue
#: 15: it only turned a test skip into a failure and reworded polling sleeps.
BASELINE = "bccac1e"
BEFORE_DIR = (ROOT / ".cache").resolve() / "bench-before"
RUN_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Metric:
    """One figure a benchmark reports; ``better`` is "higher", "lower" or ""."""

    bench: str
    name: str
    unit: str
    better: str


@dataclass(frozen=True)
class Bench:
    """An existing benchmark: its script, small-size options and its reader."""

    name: str
    script: str
    options: tuple[str, ...]
    metrics: tuple[Metric, ...]
    read: Callable[[Path, str], dict[str, float]]


def _recovery(tree: Path, _stdout: str) -> dict[str, float]:
    rows = json.loads((tree / "bench" / "results" / "recovery.json").read_text())
    got = {}
    for row in rows:
        if row.get("failures") == 0 and row.get("epochs") == 1:
            got[f"{row['mechanism']} resume s"] = float(row["time_to_resume_s"])
    return got


def _checkpoint(_tree: Path, stdout: str) -> dict[str, float]:
    start = re.search(r"^\{", stdout, re.MULTILINE)
    if start is None:
        msg = f"storm_checkpoint.py printed no JSON: {stdout[-500:]!r}"
        raise RuntimeError(msg)
    results, _end = json.JSONDecoder().raw_decode(stdout[start.start() :])
    got = {}
    for serializer, modes in results.items():
        off = float(modes["off"]["tuples_per_s"])
        on = float(modes["on"]["tuples_per_s"])
        got[f"{serializer} off tuples/s"] = off
        got[f"{serializer} every 1 s tuples/s"] = on
        got[f"{serializer} off/on"] = off / on
    return got


def _spark(tree: Path, _stdout: str) -> dict[str, float]:
    data = json.loads((tree / "bench" / "results" / "spark_engine.json").read_text())
    got = {}
    for row in data["rows"]:
        prefix = f"{row['topology']} {row['engine']}"
        got[f"{prefix} records/s"] = float(row["records_per_s"])
        if row["engine"] == "spark_sr3":
            got[f"{prefix} batch p50 ms"] = float(row["batch_p50_ms"] or "nan")
            got[f"{prefix} SR3 share"] = float(row["sr3_share"] or "nan")
    return got


BENCHES = (
    Bench(
        "recovery",
        "bench/recovery.py",
        # 100 MB of 1 KiB values, failure-free, no delta chain, raw loopback as
        # the control (its code is the same in both trees)
        (
            "--sizes", "100MB", "--shapes", "small", "--failures", "0",
            "--repeat", "3", "--baselines", "raw", "--delta-max", "1MB",
        ),
        tuple(
            Metric("recovery", f"{m} resume s", "s", "lower")
            for m in ("star", "line", "tree", "raw-loopback")
        ),
        _recovery,
    ),
    Bench(
        "checkpoint",
        "bench/storm_checkpoint.py",
        ("--lines", "5000", "--repeats", "1", "--json"),
        tuple(
            Metric("checkpoint", f"{s} {what}", unit, better)
            for s in ("json", "msgpack")
            for what, unit, better in (
                ("off tuples/s", "tuples/s", "higher"),
                ("every 1 s tuples/s", "tuples/s", "higher"),
                ("off/on", "ratio", ""),
            )
        ),
        _checkpoint,
    ),
    Bench(
        "spark",
        "bench/spark_engine.py",
        ("--topologies", "wordcount", "--scale", "1", "--repeats", "1"),
        (
            Metric("spark", "wordcount storm records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_sr3 records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_plain records/s", "records/s", "higher"),
            Metric("spark", "wordcount spark_sr3 batch p50 ms", "ms", "lower"),
            Metric("spark", "wordcount spark_sr3 SR3 share", "share", "lower"),
        ),
        _spark,
    ),
)  # fmt: skip


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


# --- trees and runs -----------------------------------------------------------


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def before_tree(rev: str) -> tuple[Path, str]:
    """The baseline worktree at ``rev`` (added, or moved there); its commit."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if (BEFORE_DIR / ".git").exists():
        if _git("rev-parse", "HEAD", cwd=BEFORE_DIR) != commit:
            _git("checkout", "--detach", "--quiet", commit, cwd=BEFORE_DIR)
    else:
        BEFORE_DIR.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "--detach", str(BEFORE_DIR), commit)
    return BEFORE_DIR, commit


def known_options(tree: Path, script: str) -> set[str]:
    """The ``--options`` a tree's version of ``script`` accepts."""
    out = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", out))


def adapt(options: tuple[str, ...], known: set[str]) -> tuple[list[str], list[str]]:
    """``options`` without the flags (and their values) not in ``known``."""
    kept: list[str] = []
    dropped: list[str] = []
    for i, item in enumerate(options):
        if item.startswith("--"):
            (kept if item in known else dropped).append(item)
        elif options[i - 1] in known:
            kept.append(item)
    return kept, dropped


def _snapshot(results: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in results.glob("*") if p.is_file()}


def _put_back(results: Path, saved: dict[Path, bytes]) -> None:
    """Leave ``results`` as ``saved`` found it (a run rewrites its files)."""
    for path in results.glob("*"):
        if path.is_file() and path not in saved:
            path.unlink()
    for path, data in saved.items():
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)


def run_once(bench: Bench, tree: Path, options: list[str]) -> dict[str, Any]:
    """Run one benchmark in ``tree``; return its metrics, seconds and load."""
    results = tree / "bench" / "results"
    saved = _snapshot(results)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, bench.script, *options],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            check=False,
            timeout=RUN_TIMEOUT_S,
        )
        if proc.returncode != 0:
            tail = proc.stderr[-2000:]
            msg = f"{bench.script} in {tree} exited {proc.returncode}: {tail}"
            raise RuntimeError(msg)
        metrics = bench.read(tree, proc.stdout)
    finally:
        _put_back(results, saved)
    return {
        "metrics": metrics,
        "seconds": round(time.monotonic() - started, 1),
        "load_1m_after": os.getloadavg()[0],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every chosen benchmark in both trees, ``args.repeats`` interleaved rounds."""
    before, before_commit = before_tree(args.before)
    trees = {"before": before, "after": ROOT}
    benches = [b for b in BENCHES if b.name in args.benches]
    options: dict[str, dict[str, list[str]]] = {}
    dropped: dict[str, dict[str, list[str]]] = {}
    for bench in benches:
        options[bench.name], dropped[bench.name] = {}, {}
        for side, tree in trees.items():
            kept, lost = adapt(bench.options, known_options(tree, bench.script))
            options[bench.name][side], dropped[bench.name][side] = kept, lost
    runs: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    for repeat in range(args.repeats):
        order = ["before", "after"] if repeat % 2 == 0 else ["after", "before"]
        for bench in benches:
            for side in order:
                print(f"# round {repeat + 1}/{args.repeats}: {bench.name}, {side}",
                      file=sys.stderr, flush=True)  # fmt: skip
                try:
                    got = run_once(bench, trees[side], options[bench.name][side])
                except (RuntimeError, OSError, ValueError, KeyError,
                        subprocess.TimeoutExpired) as exc:  # fmt: skip
                    # one failed run costs its samples, not the whole comparison
                    got = {"metrics": {}, "error": str(exc)[-2000:]}
                runs.append({"round": repeat, "bench": bench.name, "side": side, **got})
                print(f"#   {got}", file=sys.stderr, flush=True)
    return {
        "before_rev": args.before,
        "before_commit": before_commit,
        "after_commit": _git("rev-parse", "HEAD"),
        "after_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "repeats": args.repeats,
        "cores": os.cpu_count(),
        "load_start": list(load_start),
        "load_end": list(os.getloadavg()),
        "options": options,
        "dropped_options": dropped,
        "runs": runs,
        "rows": summarize(runs, benches),
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


# --- report -------------------------------------------------------------------


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--before", default=BASELINE, metavar="REV", help=f"baseline ({BASELINE})"
    )
    parser.add_argument("--repeats", type=int, default=2, help="rounds (2)")
    parser.add_argument(
        "--benches",
        default=",".join(b.name for b in BENCHES),
        help="comma-separated subset of recovery,checkpoint,spark",
    )
    parser.add_argument(
        "--report-only", action="store_true", help=f"redraw from {NAME}.json"
    )
    args = parser.parse_args()
    args.benches = set(args.benches.split(","))
    if args.report_only:
        result = json.loads((RESULTS / f"{NAME}.json").read_text())
    else:
        result = measure(args)
    print(write(result))
    print(markdown(result).split("\n\n", 1)[1])


if __name__ == "__main__":
    main()
