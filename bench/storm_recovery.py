"""Recovery time of a killed stateful Storm task holding ~100 MB, per mechanism.

Runs ``bench/topologies/bigstate.py`` (a replayable spout of ``--records``
(key, payload) tuples of ``--value-bytes`` each, fields-grouped into one
``store`` task that keeps every payload) with ``sr3 run`` against one lab of
five ring nodes, once per recovery mechanism (star, line, tree, set through
``-o sr3.recovery.mechanism=M``), killing ``store:0`` with SIGKILL at
``--kill-at`` seconds. By default a calibration run without a kill
(``--until-idle``) measures when the topology goes idle, and the kill lands
``--margin`` seconds later: the whole state is built and committed, so the
task restores all of it. Runs with a kill use ``--duration KILL_AT+AFTER``:
with ``--until-idle`` a kill landing on an idle topology can end the run
before the task restored (``--until-idle`` here keeps that behaviour).

Per run it reads the recovery from ``sr3 run --json``: restored bytes,
detect (kill to detection), restore (rollback until every stateful task
restored: task restart plus the ring restore), replay (restored until the
first epoch committed after the rollback) and the ring restore's own time.
Prints a Markdown table of medians and writes
bench/results/storm_recovery.{csv,json,md}. Not a test.

    .venv/bin/python bench/storm_recovery.py --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402

TOPOLOGY = ROOT / "bench" / "topologies" / "bigstate.py"
RESULTS = ROOT / "bench" / "results"
MECHANISMS = ("star", "line", "tree")
COMPONENT = "store"
MB = 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--kill-at", type=float, default=None, help="seconds (default: calibrate)"
    )
    parser.add_argument(
        "--margin", type=float, default=3.0, help="kill this long after idle"
    )
    parser.add_argument(
        "--after",
        type=float,
        default=8.0,
        help="with a kill, run --duration KILL_AT+AFTER instead of --until-idle",
    )
    parser.add_argument(
        "--until-idle",
        action="store_true",
        help="runs with a kill use --until-idle (may end before the restore)",
    )
    parser.add_argument("--serializer", choices=["json", "msgpack"], default="msgpack")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--lab", default=None, help="existing lab dir (else a new one)")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    if args.lab:
        results = measure(Path(args.lab).resolve(), mechanisms, args)
    else:
        with bench_lab(args.nodes) as lab:
            results = measure(lab.root, mechanisms, args)
    write_results(results)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(markdown(results))


def command(lab: Path, args: argparse.Namespace, mechanism: str, kill_at: float | None):
    """Return the ``sr3 run`` argv of one run (no kill when ``kill_at`` is None)."""
    argv = [sys.executable, "-m", "sr3_cli", "run", str(TOPOLOGY.relative_to(ROOT))]
    if kill_at is None or args.until_idle:
        argv += ["--until-idle"]
    else:
        # --until-idle can end a run right after a kill that lands once the
        # topology is idle, before the task restored: run for a fixed time.
        argv += ["--duration", f"{kill_at + args.after:g}"]
    argv += ["--json", "--lab", str(lab)]
    argv += ["--serializer", args.serializer, "--timeout", str(args.timeout)]
    if kill_at is not None:
        argv += ["--kill", f"{COMPONENT}:0@{kill_at:g}"]
    argv += ["-o", f"bigstate.records={args.records}"]
    argv += ["-o", f"bigstate.value.bytes={args.value_bytes}"]
    argv += ["-o", f"sr3.recovery.mechanism={mechanism}"]
    return argv


def sr3_run(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run ``sr3 run ... --json`` and return its report."""
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 (our own CLI)
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    if not done.stdout.strip():
        msg = f"sr3 run failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    report = json.loads(done.stdout)
    report["wall_s"] = round(time.monotonic() - started, 3)
    report["returncode"] = done.returncode
    return report


def measure(lab: Path, mechanisms: list[str], args: argparse.Namespace) -> dict:
    expected = args.records * args.value_bytes
    calibration = None
    kill_at = args.kill_at
    if kill_at is None:
        argv = command(lab, args, mechanisms[0], None)
        report = sr3_run(argv, args.timeout)
        calibration = {
            "seconds": report["seconds"],
            "idle": report["idle"],
            "checkpoints": report["checkpoints"],
            "tuples_per_s": report["throughput"]["tuples_per_s"],
        }
        kill_at = round(report["seconds"] + args.margin, 1)
        print(
            f"calibration: idle after {report['seconds']} s "
            f"({report['throughput']['tuples_per_s']} tuples/s); kill at {kill_at} s",
            file=sys.stderr,
        )
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = (
            mechanisms[repeat % len(mechanisms) :]
            + mechanisms[: repeat % len(mechanisms)]
        )
        for mechanism in order:
            argv = command(lab, args, mechanism, kill_at)
            report = sr3_run(argv, args.timeout)
            run = one_run(report, mechanism, repeat)
            run["command"] = " ".join(argv[2:])
            runs.append(run)
            print(
                f"{mechanism} #{repeat}: restored {run['restored_bytes'] / MB:.1f} MB "
                f"detect {run['detect_s']} restore {run['restore_s']} "
                f"replay {run['replay_s']} (run {report['seconds']} s)",
                file=sys.stderr,
            )
    return {
        "topology": str(TOPOLOGY.relative_to(ROOT)),
        "records": args.records,
        "value_bytes": args.value_bytes,
        "expected_state_bytes": expected,
        "serializer": args.serializer,
        "nodes": args.nodes,
        "kill": f"{COMPONENT}:0@{kill_at:g}",
        "calibration": calibration,
        "summary": summarize(runs, mechanisms),
        "runs": runs,
    }


def one_run(report: dict[str, Any], mechanism: str, repeat: int) -> dict[str, Any]:
    """Pick the killed task's recovery out of one ``sr3 run --json`` report."""
    recoveries = [r for r in report["recoveries"] if r["cause"].startswith(COMPONENT)]
    base = {
        "mechanism": mechanism,
        "repeat": repeat,
        "idle": report["idle"],
        "run_s": report["seconds"],
        "checkpoints": report["checkpoints"].get("count"),
        "state_keys": report["state"].get(COMPONENT, {}).get("keys"),
        "recoveries": len(report["recoveries"]),
        "error_count": report["error_count"],
    }
    if not recoveries:
        return base | {"restored_bytes": 0, "detect_s": None, "restore_s": None}
    rec = recoveries[0]
    timeline = rec["timeline"]
    task = next(iter(rec["restores"].values()), {})
    phases = {p["phase"]: p["seconds"] for p in task.get("phases", [])}
    parts = [timeline["detect_s"], timeline["restore_s"], timeline["replay_s"]]
    return base | {
        "used": rec["used"],
        "restored_bytes": rec["restored_bytes"],
        "restored_epoch": task.get("epoch"),
        "shards": task.get("shards"),
        "detect_s": timeline["detect_s"],
        "restore_s": timeline["restore_s"],
        "replay_s": timeline["replay_s"],
        "total_s": round(sum(parts), 4) if None not in parts else None,
        "ring_restore_s": task.get("seconds"),
        "transfer_s": phases.get("transfer"),
        "install_s": phases.get("install"),
        "recovery": rec,
    }


def _median(values: list[Any]) -> float | None:
    numbers = [v for v in values if v is not None]
    return round(statistics.median(numbers), 4) if numbers else None


def summarize(runs: list[dict[str, Any]], mechanisms: list[str]) -> list[dict]:
    rows = []
    for mechanism in mechanisms:
        mine = [r for r in runs if r["mechanism"] == mechanism]
        row: dict[str, Any] = {
            "mechanism": mechanism,
            "used": ",".join(sorted({str(r.get("used")) for r in mine})),
            "runs": len(mine),
        }
        for key in (
            "restored_bytes",
            "detect_s",
            "restore_s",
            "replay_s",
            "total_s",
            "ring_restore_s",
            "transfer_s",
        ):
            row[key] = _median([r.get(key) for r in mine])
        rows.append(row)
    return rows


def markdown(results: dict[str, Any]) -> str:
    headers = [
        "mechanism",
        "restored MB",
        "detect s",
        "restore s",
        "replay s",
        "total s",
        "ring restore s",
        "transfer s",
    ]
    lines = [
        f"bigstate: {results['records']} records x {results['value_bytes']} B "
        f"(~{results['expected_state_bytes'] / MB:.0f} MB) in one task, "
        f"{results['nodes']} ring nodes, kill {results['kill']}, "
        f"median of {results['summary'][0]['runs']} runs",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    for row in results["summary"]:
        cells = [
            f"{row['mechanism']} ({row['used']})",
            f"{(row['restored_bytes'] or 0) / MB:.1f}",
            row["detect_s"],
            row["restore_s"],
            row["replay_s"],
            row["total_s"],
            row["ring_restore_s"],
            row["transfer_s"],
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def write_results(results: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "storm_recovery.json").write_text(
        json.dumps(results, indent=2) + "\n", encoding="utf-8"
    )
    (RESULTS / "storm_recovery.md").write_text(
        markdown(results) + "\n", encoding="utf-8"
    )
    fields = [
        "mechanism",
        "repeat",
        "used",
        "restored_bytes",
        "restored_epoch",
        "detect_s",
        "restore_s",
        "replay_s",
        "total_s",
        "ring_restore_s",
        "transfer_s",
        "install_s",
        "run_s",
        "idle",
        "checkpoints",
        "state_keys",
        "recoveries",
        "error_count",
    ]
    with (RESULTS / "storm_recovery.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results["runs"])


if __name__ == "__main__":
    main()
