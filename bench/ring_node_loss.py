"""A ring node lost mid-run: task scope (the open epoch given up) against global.

Runs ``bench/topologies/local_store.py`` (as ``bench/local_recovery.py`` does: a
replayable spout fills eight ``store`` tasks with ``--fill`` records of
``--value-bytes`` each, then streams ``--rate`` small records per second; each
task logs the wall time of every tuple it processes) with ``sr3 run`` against
one lab of three ring nodes, all in one invocation:

1. one failure-free run, to time the fill;
2. ``node-2`` SIGKILLed ``--margin`` s after the fill, once with
   ``sr3.recovery.scope=task`` and once with ``global``; the node is started
   again between the two runs.

Per run: the eight tasks' steady rate (the 3 s before the kill), their rate in
the ``--window`` s after it, the longest stretch in which their 1 s rate was
below half the steady rate (the pause the loss cost), the task processes that
restarted, the report's recoveries and ``ring_nodes_left``. Ratios are task
against global in the same invocation. Writes
bench/results/ring_node_loss.{json,md} and a throughput-over-time plot with the
kill marked (bench/results/ring_node_loss.png). Not a test.

    .venv/bin/python bench/ring_node_loss.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402
from bench.local_recovery import (  # noqa: E402
    BUCKET_S,
    STEADY_S,
    add_load_args,
    rate,
    run,
)
from sr3_cli.commands import wait_for_members  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCOPES = ("task", "global")
NODE = "node-2"


def analyse(result: dict[str, Any], kill_at: float, window: float) -> dict[str, Any]:
    """The run's figures around the kill (``kill_at`` s after it started)."""
    tasks = result["tasks"]
    started = result["started"]
    kill = started + kill_at
    times = sorted(t for m in tasks.values() for t, _ in m["P"])
    steady = rate(times, kill - STEADY_S, kill)
    longest = stall = 0.0
    t = kill + 1.0
    while t <= kill + window:
        if rate(times, t - 1.0, t) < 0.5 * steady:
            stall += BUCKET_S
            longest = max(longest, stall)
        else:
            stall = 0.0
        t += BUCKET_S
    restarts = sum(len({pid for _, pid in m["R"]}) - 1 for m in tasks.values())
    report = result["report"]
    local = report["checkpoints"].get("local_recovery") or {}
    buckets = int((times[-1] - started) / BUCKET_S) + 1
    counts = [0] * buckets
    for at in times:
        counts[int((at - started) / BUCKET_S)] += 1
    return {
        "steady_tps": round(steady, 1),
        "after_kill_tps": round(rate(times, kill, kill + window), 1),
        "after_ratio": round(rate(times, kill, kill + window) / steady, 3)
        if steady
        else None,
        "longest_half_rate_s": round(longest, 2),
        "task_restarts": restarts,
        "recoveries": len(report["recoveries"]),
        "restored_bytes": sum(r.get("restored_bytes", 0) for r in report["recoveries"]),
        "ring_nodes_left": local.get("ring_nodes_left", []),
        "series": [c / BUCKET_S for c in counts],
        "kill_at_s": kill_at,
    }


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(9, 3.4))
    for scope, result in results.items():
        xs = [i * BUCKET_S for i in range(len(result["series"]))]
        ax.plot(xs, result["series"], label=f"sr3.recovery.scope={scope}")
    kill = next(iter(results.values()))["kill_at_s"]
    ax.axvline(kill, color="red", linestyle="--", label=f"{NODE} SIGKILLed")
    ax.set_xlabel("seconds since sr3 run started")
    ax.set_ylabel("tuples/s, 8 store tasks")
    ax.set_title("A ring node lost mid-run")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    rows = [
        ("steady, 3 s before the kill (tuples/s)", "steady_tps"),
        (f"the {args.window:g} s after the kill (tuples/s)", "after_kill_tps"),
        ("after / steady", "after_ratio"),
        ("longest stretch under half the steady rate (s)", "longest_half_rate_s"),
        ("task processes restarted", "task_restarts"),
        ("recoveries in the report", "recoveries"),
        ("bytes restored", "restored_bytes"),
    ]
    task, glob = results["task"], results["global"]
    lines = [
        "| measure | scope=task | scope=global | task/global |",
        "|---|---|---|---|",
    ]
    for label, key in rows:
        a, b = task.get(key), glob.get(key)
        ok = isinstance(a, int | float) and isinstance(b, int | float) and b
        ratio = str(round(a / b, 3)) if ok else ""
        lines.append(f"| {label} | {a} | {b} | {ratio} |")
    left = task["ring_nodes_left"]
    lines += [
        "",
        f"Fill {args.fill} records x {args.value_bytes} B over 8 tasks, then "
        f"{args.rate} records/s; {NODE} killed at {task['kill_at_s']:.2f} s. "
        f"Under task scope the report's ring_nodes_left: {json.dumps(left)}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_args(parser, after=20.0)
    parser.add_argument("--window", type=float, default=12.0)
    parser.add_argument(
        "--name", default="ring_node_loss", help="results file stem in bench/results"
    )
    args = parser.parse_args()
    fill_conf = {"lr.fill": args.fill, "lr.value.bytes": args.value_bytes}
    results: dict[str, dict[str, Any]] = {}
    with bench_lab(3) as lab, tempfile.TemporaryDirectory() as tmp:
        free = run(lab, Path(tmp) / "free", {**fill_conf, "lr.stream": 0})
        last = max(t for m in free["tasks"].values() for t, _ in m["P"])
        kill_at = last - free["started"] + args.margin
        stream = int(args.rate * (args.margin + args.after))
        for scope in SCOPES:
            conf = {
                **fill_conf,
                "lr.stream": stream,
                "lr.rate": args.rate,
                "sr3.recovery.scope": scope,
            }
            try:
                result = run(
                    lab, Path(tmp) / scope, conf, "--kill-node", f"{NODE}@{kill_at:.2f}"
                )
            finally:
                lab.start_nodes([NODE])
                wait_for_members(lab, 3)
            results[scope] = analyse(result, kill_at, args.window)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"args": vars(args), "runs": results}
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=2))
    plot(results, RESULTS / f"{args.name}.png")
    table = markdown(results, args)
    (RESULTS / f"{args.name}.md").write_text(table)
    print(table)  # noqa: T201 - a bench's output


if __name__ == "__main__":
    main()
