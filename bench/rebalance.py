"""Live ``sr3 rebalance`` against stop-restore-restart, same topology and state.

Runs ``bench/topologies/rebalance_kv.py`` (keyed counts over ``--keys`` keys,
``--pad`` bytes of state per key, a source at ``--rate`` events per second,
every output's end-to-end latency recorded by a sink) against one lab of three
ring nodes, twice:

* live: ``sr3 run -e p2 --until-idle``; at ``--at`` seconds, ``sr3 rebalance
  rebalance_kv -e count=4`` while it runs (Storm's fields grouping: the
  component's tasks restart and re-read their keys);
* key-groups: the same under ``sr3.rebalance.routing = key-groups`` (key groups
  move between live tasks, ``--batch`` of them a batch, a batch every other
  epoch; Megaphone);
* stop-restart: ``sr3 run -e p2 --duration AT``, then ``sr3 run -e p4 --resume
  --until-idle`` (the state re-partitioned from the ring at start).

Per mode: the longest pause of a key (live: the run report's
``longest_key_pause_s``; stop-restart: the gap between the last output before
the stop and the first after the restart, when every key pauses), p99 latency
steady (before the change) and during the change, time to complete the change,
and the bytes the new tasks read against the minimum (the state of the keys
that change owner at the switch, msgpack-encoded). Ratios are live against
stop-restart in the same invocation. Writes bench/results/rebalance.{json,md}
and a plot of throughput and p99 latency over time with the changes marked,
bench/results/rebalance.png (``--name`` for others). ``--fill N`` adds N cold
keys of ``--fill-bytes`` each, written by a run of their own before each mode
(1 GB in all: ``--fill 16384 --fill-bytes 65536``); the measured runs then
``--resume`` from it. Not a test.

    .venv/bin/python bench/rebalance.py
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
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402 - after the sys.path insert
from sr3.keygroups import key_group, range_table  # noqa: E402 - after the sys.path insert
from sr3_cli.lab import Lab  # noqa: E402 - after the sys.path insert
from topology_api.java_hash import key_task_index  # noqa: E402 - after the sys.path insert
from topology_api.rebalance_plan import plan_key_groups  # noqa: E402 - after the sys.path insert

TOPOLOGY = ROOT / "bench" / "topologies" / "rebalance_kv.py"
NAME = "rebalance_kv"
RESULTS = ROOT / "bench" / "results"
BUCKET_S = 1.0
MODES = ("live", "key-groups", "restart")


def sr3(lab: Lab, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"sr3 {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    return proc


def run_argv(
    out: Path, args: argparse.Namespace, env: str, *, key_groups: bool = False
) -> list[str]:
    conf: dict[str, Any] = {
        "rebal.out": out,
        "rebal.rate": args.rate,
        "rebal.events": args.events,
        "rebal.keys": args.keys,
        "rebal.pad": args.pad,
        "rebal.fill": args.fill,
        "rebal.fill.bytes": args.fill_bytes,
        "sr3.checkpoint.interval.s": 0.5,
        "sr3.idle.quiet.s": 0.5,
    }
    if key_groups:
        conf["sr3.rebalance.routing"] = "key-groups"
        conf["sr3.rebalance.batch.key.groups"] = args.batch
    argv = ["run", str(TOPOLOGY), "-e", env]
    for key, value in conf.items():
        argv += ["-o", f"{key}={value}"]
    return argv


def read_sink(out: Path) -> tuple[float, dict[int, tuple[float, float]]]:
    """Return t0 and, per event, (latency, wall time) of its first output."""
    t0 = float((out / "t0").read_text())
    first: dict[int, tuple[float, float]] = {}
    for path in out.glob("sink-*.csv"):
        for row in path.read_text().splitlines():
            parts = row.split(",")
            if len(parts) != 3:  # noqa: PLR2004 - a row cut by a kill
                continue
            n, value = int(parts[0]), (float(parts[1]), float(parts[2]))
            if n not in first or value[1] < first[n][1]:
                first[n] = value
    return t0, first


def p99(values: list[float]) -> float:
    if len(values) < 2:  # noqa: PLR2004 - quantiles need two values
        return max(values, default=0.0)
    return statistics.quantiles(values, n=100)[98]


def minimum_bytes(
    args: argparse.Namespace, events_before: int, *, key_groups: bool = False
) -> int:
    """State bytes of the keys that change owner going from 2 to 4 tasks.

    Under key-groups routing, the keys of the key groups the plan moves. The
    cold keys of the fill count too.
    """
    moving = {m.key_group for m in plan_key_groups(range_table(2, 256), 4)}

    def moves(values: tuple[str]) -> bool:
        if key_groups:
            return key_group(values, 256) in moving
        return key_task_index(values, None, 2) != key_task_index(values, None, 4)

    total = 0
    for k in range(min(args.keys, events_before)):
        key = f"k{k:06d}"
        if not moves((key,)):
            continue
        count = (events_before - 1 - k) // args.keys + 1
        fields = {"n": count, "pad": "x" * args.pad}
        total += len(key) + len(msgpack.packb(fields, use_bin_type=True))
    cold = len(msgpack.packb({"pad": "x" * args.fill_bytes}, use_bin_type=True))
    for k in range(args.fill):
        if moves((f"f{k:06d}",)):
            total += len(f"f{k:06d}") + cold
    return total


def summarize(
    mode: str,
    out: Path,
    window: tuple[float, float],
    extra: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    t0, first = read_sink(out)
    start, end = window
    # steady: outputs before the change of events due --steady-from s after the
    # start (a resumed run's restore loads in the background first);
    # during: events due while the change was under way
    steady = [
        lat
        for n, (lat, at) in first.items()
        if n / args.rate > args.steady_from and at < start
    ]
    during = [
        lat for n, (lat, _at) in first.items() if start <= t0 + n / args.rate <= end
    ]
    series: dict[int, int] = {}
    worst: dict[int, float] = {}
    for lat, at in first.values():
        bucket = int((at - t0) // BUCKET_S)
        series[bucket] = series.get(bucket, 0) + 1
        worst[bucket] = max(worst.get(bucket, 0.0), lat)
    size = max(series) + 1
    return {
        "mode": mode,
        "events": len(first),
        "expected_events": args.events,
        "change_start_s": round(start - t0, 3),
        "change_end_s": round(end - t0, 3),
        "complete_s": round(end - start, 3),
        "p99_steady_s": round(p99(steady), 4),
        "p99_during_s": round(p99(during), 4),
        "series": [series.get(b, 0) / BUCKET_S for b in range(size)],
        "max_latency": [round(worst.get(b, 0.0), 4) for b in range(size)],
        **extra,
    }


def fill_run(
    lab: Lab, out: Path, args: argparse.Namespace, *, key_groups: bool = False
) -> float:
    """Run the fill alone (``--fill`` cold keys, no paced events) to its end.

    The measured run then starts with ``--resume`` from the fill's committed
    epoch. Returns the fill's wall time (s); 0 without a fill.
    """
    if not args.fill:
        return 0.0
    started = time.monotonic()
    argv = run_argv(out, args, "p2", key_groups=key_groups)
    argv[argv.index(f"rebal.events={args.events}")] = "rebal.events=0"
    sr3(lab, *argv, "--until-idle", "--json", timeout=args.timeout)
    return round(time.monotonic() - started, 1)


def resume_flag(args: argparse.Namespace) -> list[str]:
    return ["--resume"] if args.fill else []


def live_run(
    lab: Lab, args: argparse.Namespace, *, key_groups: bool = False
) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="rebalance-live-"))
    fill_s = fill_run(lab, out, args, key_groups=key_groups)
    argv = [
        *run_argv(out, args, "p2", key_groups=key_groups),
        *resume_flag(args),
        "--until-idle",
        "--json",
    ]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sr3_cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        while not (out / "t0").exists():
            time.sleep(0.05)
        t0 = float((out / "t0").read_text())
        time.sleep(max(0.0, t0 + args.at - time.time()))
        asked = sr3(lab, "rebalance", NAME, "-e", "count=4", "-w", "300", "--json")
        request = json.loads(asked.stdout)["request"]
        stdout, stderr = proc.communicate(timeout=args.timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        msg = f"live run exited {proc.returncode}: {stderr[-2000:]}"
        raise RuntimeError(msg)
    entry = json.loads(stdout)["rebalances"][0]
    start = float(request["requested_at"])
    end = start + entry["end_s"] - entry["start_s"]
    before = int((start - t0) * args.rate)
    extra = {
        "longest_key_pause_s": entry["longest_key_pause_s"],
        "bytes_read": entry["bytes_moved"],
        "bytes_minimum": minimum_bytes(args, before, key_groups=key_groups),
        "held_tuples": entry["held_tuples"],
        "fill_s": fill_s,
    }
    if key_groups:
        extra.update(
            batches=entry["batches"],
            key_groups_moved=entry["key_groups_moved"],
            kept_processed=entry["kept_processed"],
        )
    mode = "key-groups rebalance" if key_groups else "live rebalance"
    return summarize(mode, out, (start, end), extra, args)


def stop_restart(lab: Lab, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="rebalance-restart-"))
    fill_s = fill_run(lab, out, args)
    # --duration counts from the cluster's start; a resumed run's restore is
    # lazy, so its spout stamps t0 about then (the table's change start says)
    first_run = [*run_argv(out, args, "p2"), *resume_flag(args), "--json"]
    sr3(lab, *first_run, "--duration", str(args.at), timeout=args.timeout)
    stopped = time.time()
    second = sr3(lab, *run_argv(out, args, "p4"), "--resume", "--until-idle", "--json")
    report = json.loads(second.stdout)
    _t0, first = read_sink(out)
    before = [at for _lat, at in first.values() if at <= stopped]
    after = [at for _lat, at in first.values() if at > stopped]
    last, resumed = max(before), min(after)
    return summarize(
        "stop-restore-restart",
        out,
        (stopped, resumed),
        {
            "longest_key_pause_s": round(resumed - last, 4),
            "bytes_read": None,
            "bytes_minimum": None,
            "recoveries": len(report.get("recoveries", [])),
            "fill_s": fill_s,
        },
        args,
    )


def table(rows: list[dict[str, Any]]) -> str:
    base = next(r for r in rows if r["mode"] == "stop-restore-restart")
    lines = [
        "| mode | events | longest key pause (s) | x restart | p99 steady (s) | "
        "p99 during (s) | during/steady | complete (s) | bytes read | bytes min |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ratio = row["longest_key_pause_s"] / max(base["longest_key_pause_s"], 1e-9)
        steady = max(row["p99_steady_s"], 1e-9)
        lines.append(
            f"| {row['mode']} | {row['events']}/{row['expected_events']} "
            f"| {row['longest_key_pause_s']} | {ratio:.2f} | {row['p99_steady_s']} "
            f"| {row['p99_during_s']} | {row['p99_during_s'] / steady:.1f} "
            f"| {row['complete_s']} | {row['bytes_read'] or '-'} "
            f"| {row['bytes_minimum'] or '-'} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only when plotting

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    colors = {
        "live rebalance": "tab:blue",
        "key-groups rebalance": "tab:green",
        "stop-restore-restart": "tab:orange",
    }
    for row in rows:
        color = colors[row["mode"]]
        xs = [i * BUCKET_S for i in range(len(row["series"]))]
        top.plot(
            xs, row["series"], label=row["mode"], color=color, drawstyle="steps-post"
        )
        bottom.plot(xs, row["max_latency"], color=color, drawstyle="steps-post")
        for ax in (top, bottom):
            ax.axvspan(
                row["change_start_s"], row["change_end_s"], color=color, alpha=0.15
            )
    top.set_ylabel("outputs per second")
    bottom.set_ylabel("max latency in second (s)")
    bottom.set_xlabel("seconds since the source started (shaded: the change 2 -> 4)")
    top.set_title("count 2 -> 4 tasks: live, key-groups, stop-restore-restart")
    top.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=250.0, help="events per second")
    parser.add_argument("--events", type=int, default=7500)
    parser.add_argument("--keys", type=int, default=3000)
    parser.add_argument("--pad", type=int, default=5000, help="state bytes per key")
    parser.add_argument("--at", type=float, default=15.0, help="change at (s)")
    parser.add_argument(
        "--steady-from",
        type=float,
        default=3.0,
        help="steady latency counts events due this many s after the start",
    )
    parser.add_argument(
        "--fill", type=int, default=0, help="cold keys written before the events"
    )
    parser.add_argument(
        "--fill-bytes", type=int, default=65536, help="state bytes per cold key"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--batch", type=int, default=16, help="key groups per batch (key-groups)"
    )
    parser.add_argument("--lab", default=None, help="existing lab dir (else a new one)")
    parser.add_argument(
        "--name", default="rebalance", help="bench/results/NAME.{md,json,png}"
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated, of live, key-groups, restart (restart always)",
    )
    args = parser.parse_args()
    modes = {m.strip() for m in args.modes.split(",")}
    unknown = modes - set(MODES)
    if unknown or "restart" not in modes:
        parser.error(
            f"--modes: {', '.join(sorted(modes))}: give some of {', '.join(MODES)}, "
            "restart among them (the baseline)"
        )

    def run_modes(lab: Lab) -> list[dict[str, Any]]:
        rows = []
        if "live" in modes:
            rows.append(live_run(lab, args))
        if "key-groups" in modes:
            rows.append(live_run(lab, args, key_groups=True))
        rows.append(stop_restart(lab, args))
        return rows

    if args.lab:
        rows = run_modes(Lab.load(Path(args.lab)))
    else:
        with bench_lab(3) as lab:
            rows = run_modes(lab)
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = table(rows)
    print(text)
    (RESULTS / f"{args.name}.md").write_text(text + "\n")
    (RESULTS / f"{args.name}.json").write_text(
        json.dumps({"args": vars(args), "runs": rows}, indent=1) + "\n"
    )
    plot(rows, RESULTS / f"{args.name}.png")
    print(f"wrote {RESULTS / args.name}.md, .json and .png")


if __name__ == "__main__":
    main()
