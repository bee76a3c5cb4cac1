"""The chaos campaign as a benchmark: schedules per hour, pass rate, recovery times.

Runs ``sr3 chaos --json`` (a seeded campaign on the default word count, both
checkpoint modes, a lab of 4 ring nodes it starts itself) and reports:

* schedules run, passed, and schedules per hour on this machine;
* per failure kind (task SIGKILL, ring-node SIGKILL, ring node frozen with
  SIGSTOP until it leaves the ring), the recovery time from the failure to the
  first epoch committed after it: p50, p99, max. Only the ``local`` mode's
  rollbacks carry a timeline in the run report; ``native`` runs report a count
  of rollbacks, so their recoveries are not in the distribution;
* the campaign's failure-free run as the baseline: a schedule's run time
  against it (what the failures cost a run).

    .venv/bin/python bench/chaos.py --schedules 40 --seed 11

Writes ``bench/results/chaos.{json,md,png}``: a strip plot of every recovery
time by failure kind, and each schedule's run time in order with failures
marked. A campaign on a real Apache Storm cluster (worker and coordinator
kills among its faults; the lab's cluster, ``sr3 lab up --storm``) writes
``bench/results/chaos-apache-storm.{json,md,png}``:

    .venv/bin/python bench/chaos.py --engine apache-storm --lab LAB --seed 5

On a Spark standalone cluster (executor and driver kills; the lab's, ``sr3 lab
up --spark``) it writes ``bench/results/chaos-spark-standalone.{json,md,png}``:

    .venv/bin/python bench/chaos.py --engine spark-standalone --lab LAB --seed 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def campaign(
    schedules: int, seed: int, conf: list[str], extra: list[str]
) -> dict[str, Any]:
    """Run ``sr3 chaos --json`` (with ``extra`` options) and return its report."""
    options = [arg for kv in conf for arg in ("-o", kv)] + extra
    command = [
        sys.executable, "-m", "sr3_cli", "chaos", "--schedules", str(schedules),
        "--seed", str(seed), *options, "--json",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        sys.exit(f"sr3 chaos failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def markdown(report: dict[str, Any]) -> str:
    """Return the tables of a campaign report."""
    runs = report["runs"]
    clean = [r["seconds"] for r in runs if not r["faults"]]
    mean_run = sum(r["seconds"] for r in runs) / len(runs)
    lines = [
        f"Seed {report['seed']}, {report['topology']}: "
        f"**{report['passed']} of {report['schedules']} schedules passed** in "
        f"{report['seconds']:.0f} s, {report['schedules_per_hour']} schedules per "
        "hour; a schedule's run took "
        f"{mean_run:.1f} s on average"
        + (
            f" against {sum(clean) / len(clean):.1f} s without faults."
            if clean
            else "."
        )
        # campaigns written before --compare existed were compared exactly
        + f" Compared: {report.get('compare_note', 'exact')}.",
        "",
        "| failure | recoveries | p50 s | p99 s | max s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, r in report["recovery"].items():
        lines.append(
            f"| {kind} | {r['count']} | {r['p50_s']} | {r['p99_s']} | {r['max_s']} |"
        )
    failed = [r for r in runs if not r["passed"]]
    if failed:
        lines += ["", "Failed schedules:", ""]
        lines += [f"- {r['index']}: {r['reason']} (`{r['replay']}`)" for r in failed]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], out: Path) -> None:
    """Recovery times by failure kind, and run times in schedule order."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    times = report["recovery_times"]
    kinds = sorted(times)
    for i, kind in enumerate(kinds):
        values = times[kind]
        xs = [i + (j % 7 - 3) * 0.04 for j in range(len(values))]
        left.scatter(xs, values, s=14, alpha=0.6)
        summary = report["recovery"][kind]
        left.hlines(summary["p50_s"], i - 0.3, i + 0.3, colors="black")
        left.hlines(summary["p99_s"], i - 0.3, i + 0.3, colors="red", linestyles="--")
    left.set_xticks(range(len(kinds)), [f"{k}\n(n={len(times[k])})" for k in kinds])
    left.set_ylabel("failure to first commit after it (s)")
    left.set_title("recovery time by failure kind (black p50, red p99)")
    runs = report["runs"]
    colors = ["tab:green" if r["passed"] else "tab:red" for r in runs]
    right.bar(range(len(runs)), [r["seconds"] for r in runs], color=colors)
    right.set_xlabel("schedule")
    right.set_ylabel("run time (s)")
    right.set_title(
        f"{report['passed']}/{report['schedules']} passed "
        f"({report['schedules_per_hour']} schedules/h; red = failed)"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    """Run the campaign and write its tables and plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=40)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "-o", dest="conf", action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument("--engine", default="storm", help="sr3 chaos --engine")
    parser.add_argument("--lab", default=None, help="sr3 chaos --lab")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="FILE",
        help="render the tables and plot of a campaign already run "
        "(`sr3 chaos --json > FILE`) instead of running one",
    )
    args = parser.parse_args()
    if args.report is not None:
        report = json.loads(args.report.read_text())
    else:
        extra = ["--engine", args.engine] + (["--lab", args.lab] if args.lab else [])
        report = campaign(args.schedules, args.seed, args.conf, extra)
    engine = report.setdefault("engine", args.engine)
    name = "chaos" if engine == "storm" else f"chaos-{engine}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (RESULTS / f"{name}.md").write_text(text)
    plot(report, RESULTS / f"{name}.png")
    print(text)
    print(f"wrote {RESULTS / name}.json, {name}.md, {name}.png")


if __name__ == "__main__":
    main()
