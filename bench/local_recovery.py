"""Task-scope (lazy and eager restore) against global recovery: one task killed.

Runs ``bench/topologies/local_store.py`` (a replayable spout fills eight
``store`` tasks with ``--fill`` records of ``--value-bytes`` each, then streams
``--rate`` small records per second over the same keys; each task logs the
wall time of every tuple it processes) with ``sr3 run`` against one lab of
three ring nodes, all in one invocation:

1. failure-free, unpaced fill only, ``sr3.recovery.scope=global`` (no logs,
   no sequence numbers) and ``task`` (logs and sequence numbers): the
   throughput cost of keeping them, and each task's log memory;
2. with ``store:0`` SIGKILLed ``--margin`` s after the fill (as measured by
   step 1), once per mode: ``lazy`` (scope task, ``sr3.recovery.lazy=true``:
   the restored task processes before its state arrived), ``eager`` (scope
   task, the whole state fetched before the first tuple) and ``global`` (a
   global rollback, eager restores, as before issue 16's lazy restore).

Per failure run: the steady rate of the seven unaffected tasks (the 3 s before
the kill) and their rate during the recovery (from the kill until the killed
task is back at full speed); the killed task's time from ready (after its
restore) to its first processed tuple, from the kill to ready, and from the
kill until it is back at full speed (its 1 s rate at 90% of its own
steady rate again); from its process start (the topology file imported) to
its first processed tuple; and the run report's ``first_tuple_s`` and
``state_loaded_s`` (from ready). Ratios are against global in the same
invocation. Writes bench/results/local_recovery.{json,md} and a
throughput-over-time plot with the kill marked, bench/results/local_recovery.png.
Not a test.

    .venv/bin/python bench/local_recovery.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402

TOPOLOGY = ROOT / "bench" / "topologies" / "local_store.py"
#: Failure runs: the conf of each.
MODES: dict[str, dict[str, Any]] = {
    "lazy": {"sr3.recovery.scope": "task", "sr3.recovery.lazy": "true"},
    "eager": {"sr3.recovery.scope": "task", "sr3.recovery.lazy": "false"},
    "global": {"sr3.recovery.scope": "global", "sr3.recovery.lazy": "false"},
}
MODE_TITLES = {
    "lazy": "scope=task, lazy restore",
    "eager": "scope=task, eager restore",
    "global": "scope=global (eager)",
}
RESULTS = ROOT / "bench" / "results"
BUCKET_S = 0.25
STEADY_S = 3.0


#: ``sr3`` run in this process, which writes its own CPU seconds (every thread,
#: user and system; not its task processes') when it exits: the engine's cost
#: per tuple, steadier than throughput on a shared machine.
_ENGINE_CPU = """
import atexit, json, resource, runpy, sys
def _cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    with open({path!r}, "w") as out:
        json.dump({{"cpu_s": use.ru_utime + use.ru_stime}}, out)
atexit.register(_cpu)
sys.argv[0] = "sr3"
runpy.run_module("sr3_cli", run_name="__main__", alter_sys=True)
"""


def run(lab: Lab, out: Path, conf: dict[str, Any], *extra: str) -> dict[str, Any]:
    """Run the topology once; return its report and the progress of each task."""
    out.mkdir(parents=True)
    cpu_file = out / "engine-cpu.json"
    args = [sys.executable, "-c", _ENGINE_CPU.format(path=str(cpu_file))]
    args += ["run", str(TOPOLOGY), "--until-idle"]
    args += ["--timeout", "600", "--json", "-o", f"lr.out={out}"]
    args += ["-o", "sr3.checkpoint.interval.s=1", "-o", "sr3.idle.quiet.s=1"]
    for key, value in conf.items():
        args += ["-o", f"{key}={value}"]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    started = time.time()
    proc = subprocess.run(
        [*args, *extra], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"sr3 run failed:\n{proc.stderr[-3000:]}")
    tasks: dict[int, dict[str, list[tuple[float, int]]]] = {}
    for path in out.glob("store-*.tsv"):
        marks: dict[str, list[tuple[float, int]]] = {"P": [], "R": [], "S": []}
        for line in path.read_text(encoding="utf-8").splitlines():
            kind, at, pid = line.split("\t")
            marks[kind].append((float(at), int(pid)))
        tasks[int(path.stem.split("-")[1])] = marks
    return {
        "report": json.loads(proc.stdout),
        "tasks": tasks,
        "started": started,
        "engine_cpu_s": json.loads(cpu_file.read_text(encoding="utf-8"))["cpu_s"],
    }


def add_load_args(parser: argparse.ArgumentParser, *, after: float) -> None:
    """The topology's load: the fill, the stream after it and when the kill comes."""
    parser.add_argument("--fill", type=int, default=16000)
    parser.add_argument("--value-bytes", type=int, default=4096)
    parser.add_argument("--rate", type=int, default=800, help="records/s streamed")
    parser.add_argument("--margin", type=float, default=4.0)
    parser.add_argument("--after", type=float, default=after)


def rate(times: list[float], start: float, end: float) -> float:
    """Tuples per second processed in [start, end)."""
    if end <= start:
        return 0.0
    return sum(1 for t in times if start <= t < end) / (end - start)


def back_at_full_speed(times: list[float], fail: float, steady: float) -> float:
    """Seconds from ``fail`` until the 1 s rate is back at 90% of ``steady``."""
    t = fail + 1.0
    end = max(times, default=fail)
    while t <= end:
        if rate(times, t - 1.0, t) >= 0.9 * steady:
            return round(t - fail, 3)
        t += BUCKET_S
    return float("nan")


def analyse(result: dict[str, Any]) -> dict[str, Any]:
    tasks = result["tasks"]
    killed = min(tasks)
    marks = tasks[killed]
    first_pid = marks["R"][0][1]
    old = [t for t, pid in marks["P"] if pid == first_pid]
    fail = max(old)  # its last logged tuple (lines are flushed every 50 ms)
    ready = next(t for t, pid in marks["R"] if pid != first_pid)
    start = next(t for t, pid in marks["S"] if pid != first_pid)
    new = [t for t, pid in marks["P"] if pid != first_pid]
    # nan: the run ended before the restarted task processed a tuple
    first = min((t for t in new if t >= ready), default=float("nan"))
    steady_killed = rate(old, fail - STEADY_S, fail)
    back = back_at_full_speed(sorted(old + new), fail, steady_killed)
    others = sorted(t for task, m in tasks.items() if task != killed for t, _ in m["P"])
    steady = rate(others, fail - STEADY_S, fail)
    window_end = fail + max(1.0, back if back == back else 5.0)
    during = rate(others, fail, window_end)
    recovery = result["report"]["recoveries"][0]
    restore: dict[str, Any] = next(iter(recovery["restores"].values()), {})
    return {
        "scope": recovery["scope"],
        "lazy": recovery.get("lazy"),
        "restored_tasks": recovery["restored_tasks"],
        "unaffected_steady_tps": round(steady, 1),
        "unaffected_during_recovery_tps": round(during, 1),
        "unaffected_ratio": round(during / steady, 3) if steady else None,
        "kill_to_ready_s": round(ready - fail, 3),
        "ready_to_first_tuple_s": round(first - ready, 4),
        "start_to_first_tuple_s": round(first - start, 4),
        "kill_to_first_tuple_s": round(first - fail, 3),
        "start_to_ready_s": round(ready - start, 4),
        "report_first_tuple_s": recovery.get("first_tuple_s"),
        "report_state_loaded_s": recovery.get("state_loaded_s"),
        "on_demand_shards": restore.get("on_demand_shards"),
        "back_at_full_speed_s": back,
        "restored_bytes": recovery["restored_bytes"],
        "series": series(tasks, killed, result["started"]),
        "fail_at_s": round(fail - result["started"], 3),
    }


def series(
    tasks: dict[int, Any], killed: int, started: float
) -> dict[str, list[float]]:
    """Tuples per second per bucket since the run started: unaffected, killed."""
    out: dict[str, list[float]] = {"unaffected": [], "killed": []}
    ends = [t for m in tasks.values() for t, _ in m["P"]]
    buckets = int((max(ends) - started) / BUCKET_S) + 1
    for name, picked in (
        ("unaffected", [t for k, m in tasks.items() if k != killed for t, _ in m["P"]]),
        ("killed", [t for t, _ in tasks[killed]["P"]]),
    ):
        counts = [0] * buckets
        for t in picked:
            counts[int((t - started) / BUCKET_S)] += 1
        out[name] = [c / BUCKET_S for c in counts]
    return out


def overhead(result: dict[str, Any], fill: int) -> dict[str, Any]:
    times = sorted(t for m in result["tasks"].values() for t, _ in m["P"])
    span = times[-1] - times[0]
    checkpoints = result["report"]["checkpoints"]
    local = checkpoints.get("local_recovery", {})
    return {
        "tps": round(fill / span, 1),
        "span_s": round(span, 3),
        # a scope whose epochs complete sooner takes more in the same fill:
        # each writes the key groups it changed, so the count is part of the cost
        "checkpoints": checkpoints["count"],
        "interval_s": checkpoints["interval_s"],
        "engine_cpu_ms_per_1k": round(1e6 * result["engine_cpu_s"] / fill, 1),
        "peak_log_bytes": local.get("peak_bytes", {}),
    }


def plot(failures: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(
        len(failures), 1, figsize=(9, 2.6 * len(failures)), sharex=True, squeeze=False
    )
    for ax, (mode, result) in zip(axes[:, 0], failures.items(), strict=True):
        xs = [i * BUCKET_S for i in range(len(result["series"]["killed"]))]
        ax.plot(xs, result["series"]["unaffected"], label="7 unaffected tasks")
        ax.plot(xs, result["series"]["killed"], label="killed task store:0")
        ax.axvline(result["fail_at_s"], color="red", linestyle="--", label="kill")
        ax.set_title(MODE_TITLES.get(mode, mode))
        ax.set_ylabel("tuples/s")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since sr3 run started")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def log_cost_us(value_bytes: int, tuples: int = 100_000) -> float:
    """Microseconds per tuple the task-scope logs add, measured alone.

    One delivery logged (:class:`ChannelLogs`) and one emit recorded in the
    output log per tuple, as the engine does under ``scope=task``, minus the
    same loop building the message alone: steadier than the difference of two
    whole runs on a shared machine.
    """
    # only for the microbenchmark, after the lab runs: the engine's own modules
    from storm_bridge.cluster.acker import PendingInput  # noqa: PLC0415 - see above
    from storm_bridge.cluster.channel_logs import ChannelLogs  # noqa: PLC0415 - see above
    from storm_bridge.cluster.channels import Output, TaskLog  # noqa: PLC0415 - see above

    task = SimpleNamespace(task_id=1, inputs={})
    # a stand-in task: the logs read only its task_id and inputs
    logs = ChannelLogs(tasks={1: task}, buffer_bytes=1 << 62, on_full=lambda: None)  # type: ignore[dict-item]  # stand-in task
    value = "v" * value_bytes

    def one(n: int, *, log: bool) -> None:
        tuple_id = str(n)
        message = {"id": tuple_id, "stream": "default", "tuple": [tuple_id, value]}
        task.inputs[tuple_id] = PendingInput({}, "spout", "default", [tuple_id, value])
        if log:
            logs.delivered(task, tuple_id, message)  # type: ignore[arg-type]  # stand-in task
            logs.logs[1].outputs.append(Output("default", message["tuple"], (2,)))

    costs = []
    for log in (False, True, False, True):
        task.inputs.clear()
        logs.logs[1] = TaskLog()
        started = time.perf_counter()
        for n in range(tuples):
            one(n, log=log)
        costs.append((time.perf_counter() - started) / tuples)
    return 1e6 * ((costs[1] + costs[3]) - (costs[0] + costs[2])) / 2


def plot_overhead(overhead: dict[str, dict[str, Any]], path: Path) -> None:
    """Each failure-free run's fill throughput and engine CPU, with the medians."""
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only when plotting

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    panels = (
        ("tps_runs", "tps", "fill throughput (tuples/s)"),
        ("engine_cpu_runs", "engine_cpu_ms_per_1k", "engine CPU (ms / 1000 tuples)"),
    )
    for ax, (runs_key, median_key, label) in zip(axes, panels, strict=True):
        for x, measured in enumerate(overhead.values()):
            runs = measured[runs_key]
            ax.scatter([x] * len(runs), runs, alpha=0.6)
            ax.hlines(measured[median_key], x - 0.25, x + 0.25, color="black")
        ax.set_xticks(range(len(overhead)), [f"scope={s}" for s in overhead])
        ax.set_ylabel(label)
    fig.suptitle("Failure-free cost of logs and sequence numbers (bar: median)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_args(parser, after=30.0)
    parser.add_argument("--repeats", type=int, default=3, help="failure-free runs")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"failure runs, comma-separated among {', '.join(MODES)}; empty for "
        "the failure-free runs alone",
    )
    parser.add_argument(
        "--kill-at", type=float, default=None, help="default: calibrated"
    )
    parser.add_argument(
        "--name", default="local_recovery", help="results file stem in bench/results"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every run (e.g. sr3.ring.max.shard.bytes=1MiB)",
    )
    args = parser.parse_args()
    fill_conf: dict[str, Any] = dict(kv.split("=", 1) for kv in args.conf)
    fill_conf.update({"lr.fill": args.fill, "lr.value.bytes": args.value_bytes})
    results: dict[str, Any] = {"args": vars(args), "overhead": {}, "failure": {}}
    with bench_lab(3) as lab, tempfile.TemporaryDirectory() as tmp:
        fill_s = 0.0
        runs: dict[str, list[dict[str, Any]]] = {"global": [], "task": []}
        for repeat in range(args.repeats):
            for scope in ("global", "task"):  # alternated: the machine drifts
                conf = {**fill_conf, "lr.stream": 0, "sr3.recovery.scope": scope}
                result = run(lab, Path(tmp) / f"free-{scope}-{repeat}", conf)
                runs[scope].append(overhead(result, args.fill))
                last = max(t for m in result["tasks"].values() for t, _ in m["P"])
                fill_s = max(fill_s, last - result["started"])
        for scope, measured in runs.items():
            if not measured:
                continue
            tps = sorted(m["tps"] for m in measured)
            cpu = sorted(m["engine_cpu_ms_per_1k"] for m in measured)
            results["overhead"][scope] = {
                "tps": round(statistics.median(tps), 1),
                "tps_runs": tps,
                "engine_cpu_ms_per_1k": round(statistics.median(cpu), 1),
                "engine_cpu_runs": cpu,
                "checkpoints_runs": [m["checkpoints"] for m in measured],
                "interval_s": measured[-1]["interval_s"],
                "peak_log_bytes": measured[-1]["peak_log_bytes"],
            }
        kill_at = args.kill_at if args.kill_at is not None else fill_s + args.margin
        stream = int(args.rate * (args.margin + args.after))
        for scope in [m for m in args.modes.split(",") if m]:
            conf = {**fill_conf, "lr.stream": stream, "lr.rate": args.rate}
            conf.update(MODES[scope])
            result = run(
                lab,
                Path(tmp) / f"kill-{scope}",
                conf,
                "--kill",
                f"store:0@{kill_at:.2f}",
            )
            try:
                results["failure"][scope] = analyse(result)
            except ValueError:
                summary = {
                    task: {
                        "R": m["R"],
                        "P": {
                            pid: sum(1 for _, p in m["P"] if p == pid)
                            for pid in {p for _, p in m["P"]}
                        },
                    }
                    for task, m in result["tasks"].items()
                }
                print(scope, kill_at, json.dumps(summary), file=sys.stderr)  # noqa: T201
                print(json.dumps(result["report"]["recoveries"]), file=sys.stderr)  # noqa: T201
                raise
    if results["overhead"]:
        results["log_us_per_tuple"] = round(log_cost_us(args.value_bytes), 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    if results["failure"]:
        plot(results["failure"], RESULTS / f"{args.name}.png")
    elif results["overhead"]:
        plot_overhead(results["overhead"], RESULTS / f"{args.name}.png")
    table = markdown(results)
    (RESULTS / f"{args.name}.md").write_text(table)
    print(table)  # noqa: T201 - a bench's output


def markdown(results: dict[str, Any]) -> str:
    failures = results["failure"]
    glob = failures.get("global", {})
    rows = [
        ("unaffected tasks, steady (tuples/s)", "unaffected_steady_tps"),
        (
            "unaffected tasks, during recovery (tuples/s)",
            "unaffected_during_recovery_tps",
        ),
        ("unaffected during / steady", "unaffected_ratio"),
        ("killed task: kill to ready (s)", "kill_to_ready_s"),
        ("killed task: ready to first tuple (s)", "ready_to_first_tuple_s"),
        ("killed task: process start to ready (s)", "start_to_ready_s"),
        ("killed task: process start to first tuple (s)", "start_to_first_tuple_s"),
        ("killed task: kill to first tuple (s)", "kill_to_first_tuple_s"),
        ("report: ready to first tuple (s)", "report_first_tuple_s"),
        ("report: ready to state loaded (s)", "report_state_loaded_s"),
        ("shards fetched on demand", "on_demand_shards"),
        ("killed task: back at full speed (s)", "back_at_full_speed_s"),
        ("bytes restored", "restored_bytes"),
    ]
    modes = list(failures)
    others = [m for m in modes if m != "global"]
    lines: list[str] = [] if modes else ["No failure runs (--modes was empty)."]
    head = " | ".join(MODE_TITLES.get(m, m) for m in modes)
    ratios = " | ".join(f"{m}/global" for m in others)
    if modes:
        lines += [
            f"| measure | {head} | {ratios} |",
            "|---" * (1 + len(modes) + len(others)) + "|",
        ]
    for label, key in rows if modes else []:
        values = [failures[m].get(key) for m in modes]
        b = glob.get(key)
        cells = []
        for m in others:
            a = failures[m].get(key)
            ok = isinstance(a, int | float) and isinstance(b, int | float) and b
            cells.append(str(round(a / b, 3)) if ok else "")
        lines.append(
            f"| {label} | {' | '.join(str(v) for v in values)} | {' | '.join(cells)} |"
        )
    free = results["overhead"]
    if not free:
        return "\n".join(lines) + "\n"
    cost = 1 - free["task"]["tps"] / free["global"]["tps"]
    log_us = results.get("log_us_per_tuple", 0.0)
    engine_us = free["global"]["engine_cpu_ms_per_1k"] or 1.0  # ms / 1000 = us / 1
    cpu_cost = (
        free["task"]["engine_cpu_ms_per_1k"] / free["global"]["engine_cpu_ms_per_1k"]
        - 1
    )
    peaks = free["task"]["peak_log_bytes"].values()
    lines += [
        "",
        f"Failure-free fill throughput: global {free['global']['tps']} tuples/s, "
        f"task {free['task']['tps']} tuples/s (cost {cost:.1%}; medians of "
        f"{results['args']['repeats']} alternated runs: global "
        f"{free['global']['tps_runs']}, task {free['task']['tps_runs']}).",
        f"Engine CPU per 1000 fill tuples (the `sr3 run` process, whole run): "
        f"global {free['global']['engine_cpu_ms_per_1k']} ms, task "
        f"{free['task']['engine_cpu_ms_per_1k']} ms (cost {cpu_cost:.1%}; runs: "
        f"global {free['global']['engine_cpu_runs']}, task "
        f"{free['task']['engine_cpu_runs']}).",
        f"The logs alone (a microbenchmark of one logged delivery and one logged "
        f"emit): {log_us} us per tuple, {log_us / engine_us:.1%} of the engine's CPU "
        "per tuple under global.",
        f"Checkpoints committed per run, in run order, at a "
        f"{free['task']['interval_s']} s interval: global "
        f"{free['global']['checkpoints_runs']}, task "
        f"{free['task']['checkpoints_runs']}.",
        f"Peak log bytes per store task: max {max(peaks, default=0)}"
        f", mean {sum(peaks) / max(1, len(peaks)):.0f}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
