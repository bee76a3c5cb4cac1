"""A worker kill on real Apache Storm: task scope against global rollback.

Starts a throw-away lab (ZooKeeper + 3 ring nodes) and an Apache Storm 2.x
cluster from the fetched jars (Nimbus + 1 supervisor, 2 slots), then runs
``bench/topologies/local_store.py`` on it with ``topology.workers=2`` (eight
``store`` tasks over both workers, each keeping a ``--value-bytes`` payload
per key: ``--fill`` records of state in all, then a paced stream), native
checkpoints every second, and SIGKILLs worker 0 at ``--kill-at`` seconds. The
same run under ``sr3.recovery.scope=task`` and ``global``, alternating
``--rounds`` times so neither always runs first. Per run, from ``sr3 run
--json``'s recovery: the owners that restored and the bytes they read, Storm's
part (kill to the relaunched tasks bumping the generation), ours (restore,
replay to the first commit after) and the replays the kept owners awaited.

Then the failure-free cost of task scope (lineages hashed at every emit, each
stateful task keeping what it processed since the last commit): word count
(every component at parallelism 2, ``--cost-lines`` lines) until idle, under
both scopes, alternating ``--cost-rounds`` times: throughput, and the CPU the
topology's Python tasks (the processes under the worker JVMs) and the workers
took per bolt tuple, sampled from /proc; CPU per tuple is steadier than
throughput on a shared machine. ``--rounds 0`` measures only the cost (into
``--name``'s files).

Prints tables with the task / global ratio of the run's medians, writes
bench/results/storm_scope.{json,md,png}. Not a test.

    .venv/bin/python bench/storm_scope.py --fill 8192 --value-bytes 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.storm_apache import WorkerCpu, ring_and_storm  # noqa: E402 - after the sys.path insert
from sr3_cli.output import table  # noqa: E402 - after the sys.path insert
from storm_bridge.sparse.run import Kill, StormRunOptions, run_on_storm  # noqa: E402 - after the sys.path insert
from storm_bridge.wiring import RingAccess  # noqa: E402 - after the sys.path insert

TOPOLOGY = ROOT / "bench" / "topologies" / "local_store.py"
WORDCOUNT = ROOT / "topologies" / "wordcount.py"
RESULTS = ROOT / "bench" / "results"
SCOPES = ("task", "global")


def one_run(
    ring: RingAccess, nimbus: str, out: Path, scope: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Run the topology once under ``scope`` with the worker kill; the row."""
    out.mkdir(parents=True)
    report = run_on_storm(
        TOPOLOGY,
        ring=ring,
        nimbus=nimbus,
        options=StormRunOptions(
            until_idle=True,
            kills=[Kill("worker", args.kill_at)],
            conf={
                "lr.out": str(out),
                "lr.fill": args.fill,
                "lr.stream": args.stream,
                "lr.rate": args.rate,
                "lr.value.bytes": args.value_bytes,
                "topology.workers": 2,
                "topology.message.timeout.secs": 5,
                "sr3.checkpoint.interval.s": 1.0,
                "sr3.recovery.scope": scope,
            },
        ),
        secret_in_conf=False,
    )
    (recovery,) = report["recoveries"]
    timeline = recovery["timeline"]
    kept = [r for r in recovery["restores"].values() if r.get("kept") is True]
    return {
        "scope": recovery["scope"],
        "reason": recovery["reason"],
        "restored_tasks": len(recovery["restored_tasks"]),
        "kept_tasks": len(kept),
        "restored_mb": round(recovery["restored_bytes"] / 1e6, 2),
        "detect_s": timeline["detect_s"],
        "restore_s": timeline["restore_s"],
        "replay_s": timeline["replay_s"],
        "replays_due": sum(int(r.get("replays_due", 0)) for r in kept),
        "tuples_per_s": report["throughput"]["tuples_per_s"],
    }


def cost_run(
    ring: RingAccess, nimbus: str, scope: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Word count until idle under ``scope``, no failure; the row."""
    with WorkerCpu() as cpu:
        report = run_on_storm(
            WORDCOUNT,
            ring=ring,
            nimbus=nimbus,
            options=StormRunOptions(
                until_idle=True,
                conf={
                    "wordcount.lines": args.cost_lines,
                    "sr3.checkpoint.interval.s": 1.0,
                    "sr3.recovery.scope": scope,
                },
            ),
            secret_in_conf=False,
        )
    tuples = int(report["throughput"]["bolt_tuples"])
    return {
        "scope": scope,
        "tuples_per_s": report["throughput"]["tuples_per_s"],
        "bolt_tuples": tuples,
        "seconds": report["seconds"],
        "component_cpu_s": round(cpu.component_seconds, 2),
        "worker_cpu_s": round(cpu.seconds, 2),
        "component_us_per_tuple": round(cpu.component_seconds * 1e6 / tuples, 1),
        "worker_us_per_tuple": round(cpu.seconds * 1e6 / tuples, 1),
    }


#: The failure-free runs' measures, per scope.
COST_KEYS = ("tuples_per_s", "component_us_per_tuple", "worker_us_per_tuple")


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files (imported only to plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(rows: list[dict[str, Any]], key: str) -> tuple[list[str], list[str]]:
    """One bar per run, in order: its labels ("task #1") and colours (task green)."""
    labels = [f"{r[key]}\n#{i + 1}" for i, r in enumerate(rows)]
    colours = ["tab:green" if r[key] == "task" else "tab:grey" for r in rows]
    return labels, colours


def plot_costs(costs: list[dict[str, Any]], path: Path) -> None:
    """Per failure-free run, in order: throughput and the tasks' CPU per tuple."""
    plt = pyplot()
    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(10, 4))
    labels, colours = bars(costs, "scope")
    rate.bar(labels, [c["tuples_per_s"] for c in costs], color=colours)
    rate.set_ylabel("bolt tuples per second")
    rate.set_title("failure-free word count on Storm")
    cpu.bar(
        labels, [c.get("component_us_per_tuple") or 0 for c in costs], color=colours
    )
    cpu.set_ylabel("Python tasks' CPU per bolt tuple (us)")
    cpu.set_title("what task scope costs the tasks")
    for ax in (rate, cpu):
        ax.tick_params(axis="x", labelsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def summary(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """Rows: measure, task median, global median, task / global."""
    keys = [
        "restored_tasks",
        "kept_tasks",
        "restored_mb",
        "detect_s",
        "restore_s",
        "replay_s",
        "replays_due",
        "tuples_per_s",
    ]
    rows = []
    for key in keys:
        task = median([r for r in runs if r["asked"] == "task"], key)
        glob = median([r for r in runs if r["asked"] == "global"], key)
        ratio = f"{task / glob:.2f}" if task is not None and glob else ""
        rows.append([key, task, glob, ratio])
    return rows


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Bars per run: restored MB, and our recovery phases stacked."""
    plt = pyplot()
    fig, (mb, phases) = plt.subplots(1, 2, figsize=(10, 4))
    labels, colours = bars(runs, "asked")
    mb.bar(labels, [r["restored_mb"] for r in runs], color=colours)
    mb.set_ylabel("MB restored from the ring")
    mb.set_title("state restored after a worker kill")
    restore = [r["restore_s"] or 0.0 for r in runs]
    replay = [r["replay_s"] or 0.0 for r in runs]
    phases.bar(labels, restore, label="restore (rollback to resumed)")
    phases.bar(labels, replay, bottom=restore, label="replay (to the next commit)")
    phases.set_ylabel("seconds")
    phases.set_title("SR3's part of the recovery")
    phases.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill", type=int, default=8192)
    parser.add_argument("--value-bytes", type=int, default=4096)
    parser.add_argument("--stream", type=int, default=6000)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--kill-at", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cost-lines", type=int, default=20000)
    parser.add_argument("--cost-rounds", type=int, default=2)
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="where the result files go"
    )
    parser.add_argument(
        "--name", default="storm_scope", help="result files' name (NAME.{json,md,png})"
    )
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    with ring_and_storm("sr3-scope-") as (ring, nimbus, tmp):
        for n, scope in enumerate(SCOPES * args.rounds):
            row = one_run(ring, nimbus, tmp / f"run{n}", scope, args)
            runs.append({"asked": scope, **row})
            print(json.dumps(runs[-1]), flush=True)
        for scope in SCOPES * args.cost_rounds:
            costs.append(cost_run(ring, nimbus, scope, args))
            print(json.dumps(costs[-1]), flush=True)
    headers = ["measure", "task (median)", "global (median)", "task / global"]
    text = table(headers, summary(runs)) if runs else ""
    cost_rows = []
    for key in COST_KEYS:
        task = median([c for c in costs if c["scope"] == "task"], key)
        glob = median([c for c in costs if c["scope"] == "global"], key)
        ratio = f"{task / glob:.3f}" if task is not None and glob else ""
        cost_rows.append([key, task, glob, ratio])
    cost_headers = ["failure-free word count", "task (median)", "global (median)"]
    cost_text = table([*cost_headers, "task / global"], cost_rows)
    text = f"{text}\n\n{cost_text}".strip()
    print(text)
    results = args.results
    results.mkdir(exist_ok=True)
    shown = {**vars(args), "results": str(results)}
    (results / f"{args.name}.json").write_text(
        json.dumps({"args": shown, "runs": runs, "costs": costs}, indent=2) + "\n"
    )
    (results / f"{args.name}.md").write_text(
        "Worker kill on Apache Storm, task scope against global rollback "
        f"(`bench/storm_scope.py`, {shown}):\n\n```\n{text}\n```\n"
    )
    if runs:
        plot(runs, results / f"{args.name}.png")
    else:
        plot_costs(costs, results / f"{args.name}.png")


if __name__ == "__main__":
    main()
