"""Throughput and p99 latency with one counting task slowed 5x, per straggler policy.

Runs ``bench/topologies/straggler_wc.py`` (word count whose source delivers
``--rate`` lines per second, ``--lines`` in all; every output's end-to-end
latency recorded by a sink task) with ``sr3 run`` against one lab of three
ring nodes, once per policy (``off``, ``duplicate``, ``restart``, set through
``-o sr3.straggler.policy=P``). Once outputs flow, one of the three ``count``
tasks is slowed 5x: a thread SIGSTOPs it for 80% of every ``--period`` (a
machine with a fifth of its share of CPU), until that process is gone (a
duplicate or a restart replaces it; the replacement runs at full speed, as on
a healthy executor) or the run ends.

Per run: throughput (lines whose last word reached the sink, per second of
the run from the source's start to the last output), p50/p99/max latency of a
line (its arrival at the source to its last word's first arrival at the
sink), and the straggler events of the report (detected at, winner, time to
take over). Ratios are against ``off`` in the same invocation. Writes
bench/results/stragglers.{json,md} and a plot of throughput over time,
bench/results/stragglers.png. Not a test.

    .venv/bin/python bench/stragglers.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402

TOPOLOGY = ROOT / "bench" / "topologies" / "straggler_wc.py"
RESULTS = ROOT / "bench" / "results"
POLICIES = ("off", "duplicate", "restart")
WORDS_PER_LINE = 8
BUCKET_S = 1.0


def count_tasks(run_pid: int) -> list[int]:
    """Pids of the run's live ``count`` task subprocesses."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == run_pid and fields[0] != "Z" and b".Count" in cmdline:
            pids.append(int(entry))
    return sorted(pids)


class Slowdown(threading.Thread):
    """SIGSTOPs a process for ``stopped`` of every ``period_s`` until it is gone."""

    def __init__(self, pid: int, period_s: float, stopped: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.period_s = period_s
        self.stopped = stopped
        self.done = threading.Event()
        self.gone_at: float | None = None

    def run(self) -> None:
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                self.done.wait(self.period_s * self.stopped)
                os.kill(self.pid, signal.SIGCONT)
                self.done.wait(self.period_s * (1 - self.stopped))
        except ProcessLookupError:
            self.gone_at = time.time()

    def stop(self) -> None:
        self.done.set()
        self.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def read_sink(out: Path) -> tuple[float, dict[int, tuple[float, float]]]:
    """Return t0 and, per complete line, (latency, completion wall time)."""
    t0 = float((out / "t0").read_text())
    first: dict[tuple[int, int], tuple[float, float]] = {}
    for path in out.glob("sink-*.csv"):
        for row in path.read_text().splitlines():
            parts = row.split(",")
            if len(parts) != 4:
                continue  # a line cut by a kill
            key = (int(parts[0]), int(parts[1]))
            value = (float(parts[2]), float(parts[3]))
            if key not in first or value[1] < first[key][1]:
                first[key] = value
    lines: dict[int, list[tuple[float, float]]] = {}
    for (n, _index), value in first.items():
        lines.setdefault(n, []).append(value)
    complete = {
        n: max(values, key=lambda v: v[1])
        for n, values in lines.items()
        if len(values) == WORDS_PER_LINE
    }
    return t0, complete


def one_run(lab: Lab, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix=f"stragglers-{policy}-"))
    env = dict(os.environ, SR3_LAB=str(lab.root))
    conf = {
        "straggler.out": str(out),
        "straggler.rate": args.rate,
        "straggler.lines": args.lines,
        "sr3.straggler.policy": policy,
        "sr3.straggler.lag.s": args.lag,
        "sr3.straggler.queue.min": args.queue_min,
        "sr3.straggler.check.s": 0.5,
        "sr3.checkpoint.interval.s": 0.5,
        "sr3.idle.quiet.s": 0.5,
    }
    argv = [sys.executable, "-m", "sr3_cli", "run", str(TOPOLOGY), "--until-idle"]
    for key, value in conf.items():
        argv += ["-o", f"{key}={value}"]
    proc = subprocess.Popen(
        [*argv, "--timeout", str(args.timeout), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    slowdown: Slowdown | None = None
    slowed_at: float | None = None
    try:
        deadline = time.monotonic() + args.timeout
        while not list(out.glob("sink-*.csv")) or len(count_tasks(proc.pid)) < 3:
            if time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.05)
        time.sleep(args.slow_after)
        tasks = count_tasks(proc.pid)
        if tasks:
            slowdown = Slowdown(tasks[0], args.period, 0.8)
            slowed_at = time.time()
            slowdown.start()
        stdout, stderr = proc.communicate(timeout=args.timeout + 60)
    finally:
        if slowdown is not None:
            slowdown.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (out / "stderr.txt").write_text(stderr)
    if proc.returncode != 0:
        msg = f"sr3 run ({policy}) exited {proc.returncode}; see {out}/stderr.txt"
        raise RuntimeError(msg)
    report = json.loads(stdout)
    t0, complete = read_sink(out)
    latencies = sorted(v[0] for v in complete.values())
    finished = max(v[1] for v in complete.values())
    series: dict[int, int] = {}
    for _latency, at in complete.values():
        bucket = int((at - t0) // BUCKET_S)
        series[bucket] = series.get(bucket, 0) + 1
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "policy": policy,
        "lines": len(complete),
        "expected_lines": args.lines,
        "seconds": round(finished - t0, 3),
        "throughput_lines_per_s": round(len(complete) / (finished - t0), 1),
        "p50_latency_s": round(quantiles[49], 4),
        "p99_latency_s": round(quantiles[98], 4),
        "max_latency_s": round(latencies[-1], 4),
        "slowed_from_s": None if slowed_at is None else round(slowed_at - t0, 3),
        "slowed_pid_gone_s": None
        if slowdown is None or slowdown.gone_at is None
        else round(slowdown.gone_at - t0, 3),
        "stragglers": report.get("stragglers", []),
        "recoveries": len(report.get("recoveries", [])),
        "series": [series.get(b, 0) / BUCKET_S for b in range(max(series) + 1)],
    }


def table(rows: list[dict[str, Any]]) -> str:
    base = rows[0]
    lines = [
        "| policy | lines | throughput (lines/s) | x off | p50 latency (s) | "
        "p99 latency (s) | x off | max latency (s) | stragglers | first: winner, "
        "takeover (s), resumed after (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        event = row["stragglers"][0] if row["stragglers"] else {}
        lines.append(
            f"| {row['policy']} | {row['lines']}/{row['expected_lines']} "
            f"| {row['throughput_lines_per_s']} "
            f"| {row['throughput_lines_per_s'] / base['throughput_lines_per_s']:.2f} "
            f"| {row['p50_latency_s']} | {row['p99_latency_s']} "
            f"| {row['p99_latency_s'] / base['p99_latency_s']:.2f} "
            f"| {row['max_latency_s']} | {len(row['stragglers'])} "
            f"| {event.get('winner', '-')}, {event.get('takeover_s', '-')}, "
            f"{event.get('resumed_after_s', '-')} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, rate: float) -> None:
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(8, 4))
    for row in rows:
        xs = [i * BUCKET_S for i in range(len(row["series"]))]
        ax.plot(xs, row["series"], label=row["policy"], drawstyle="steps-post")
    ax.axhline(rate, color="grey", linestyle=":", label="input rate")
    ax.set_xlabel("seconds since the source started")
    ax.set_ylabel("lines completed per second")
    ax.set_title("Word count, one count task slowed 5x (SIGSTOP 80% of the time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=400.0, help="lines per second")
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--period", type=float, default=2.0, help="slowdown period s")
    parser.add_argument("--slow-after", type=float, default=2.0)
    parser.add_argument("--lag", type=float, default=1.0, help="sr3.straggler.lag.s")
    parser.add_argument("--queue-min", type=int, default=1000)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--lab", default=None, help="existing lab dir (else a new one)")
    args = parser.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.lab:
        rows = [one_run(Lab.load(Path(args.lab)), p, args) for p in policies]
    else:
        with bench_lab(3) as lab:
            rows = [one_run(lab, p, args) for p in policies]
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = table(rows)
    print(text)
    (RESULTS / "stragglers.md").write_text(text + "\n")
    (RESULTS / "stragglers.json").write_text(
        json.dumps({"args": vars(args), "runs": rows}, indent=1) + "\n"
    )
    plot(rows, RESULTS / "stragglers.png", args.rate)
    print(f"wrote {RESULTS / 'stragglers.md'}, .json and .png")


if __name__ == "__main__":
    main()
