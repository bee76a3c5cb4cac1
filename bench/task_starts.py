"""Local-cluster task starts: forked from the fork server against executed.

The local cluster starts one ``streamparse_run`` process per task and per
restart. Since the fork server, a cluster forks them from one pre-imported
interpreter (``ClusterOptions(fork_tasks=True)``, the default); the baseline,
measured in the same run, executes each as Storm's supervisor does
(``fork_tasks=False``). Both on ``sbt_wordcount`` (1 spout, 2 split and 3 count
tasks, JSON multilang; ``tests/integration/storm_bridge/topologies``), in
alternating order (ABBA...), ``--repeat`` clusters each:

* **start**: ``LocalCluster.start()`` until every task has shaken hands and the
  spouts are active, wall seconds;
* **restart**: a count task SIGKILLed ``--kills`` times per cluster, each time
  from the kill until its new process has answered the handshake, wall
  seconds (with ``restart_backoff_s=0``: a task killed again before it
  answered a tuple would otherwise wait 0.1 s, doubling, before its restart);
* **CPU**: user + system seconds of every process the cluster started (its
  tasks, and the fork server with the tasks it forked), from the cluster's start
  to its stop, measured as reaped children's usage;
* **steady processing**: a second cluster per round counts ``--sentences``
  sentences of 12 words, seconds from its start until idle, to check that
  forked tasks process as fast as executed ones.

    .venv/bin/python bench/task_starts.py --repeat 6 --kills 5 --sentences 3000

Writes ``bench/results/task_starts.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sr3_cli.output import table  # noqa: E402 (after the sys.path insert above)
from storm_bridge.cluster.events import ClusterEvent, EventKind  # noqa: E402 (after the sys.path insert above)
from storm_bridge.cluster.local import LocalCluster  # noqa: E402 (after the sys.path insert above)
from storm_bridge.cluster.settings import ClusterOptions  # noqa: E402 (after the sys.path insert above)

RESULTS = ROOT / "bench" / "results"
TOPOLOGIES = ROOT / "tests" / "integration" / "storm_bridge" / "topologies"
FILE = TOPOLOGIES / "sbt_wordcount.py"
MODES = {"forked": True, "executed": False}
SENTENCES = ["the cow jumped over the moon"] * 50
LONG = "the quick brown fox jumps over the lazy dog again and again"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _ready(cluster: LocalCluster, task: int) -> list[ClusterEvent]:
    """The task's handshakes so far (a process answered with its pid)."""
    return [e for e in cluster.events(EventKind.TASK_READY) if e.task_id == task]


def one_cluster(fork: bool, kills: int) -> dict[str, Any]:
    """Start a cluster, kill a count task ``kills`` times, stop it; return timings."""
    sys.path.insert(0, str(TOPOLOGIES))
    cpu0 = _children_cpu()
    out_dir = tempfile.mkdtemp(prefix="sr3-task-starts-")
    cluster = LocalCluster(
        FILE,
        {"sbt.sentences": SENTENCES, "sbt.out_dir": out_dir},
        # a count task killed again before it answered a tuple has "never come
        # up": its restarts back off (0.1 s, doubling); measured bare here
        options=ClusterOptions(fork_tasks=fork, restart_backoff_s=0.0),
        seed=1,
    )
    t0 = time.perf_counter()
    cluster.start(timeout_s=120)
    if any(c.restarts for c in cluster.counters().values()):
        msg = f"a task of {FILE.name} restarted while starting: {cluster.errors()}"
        raise SystemExit(msg)
    start_s = time.perf_counter() - t0
    restarts = []
    task = cluster.task_ids("count_bolt")[0]
    try:
        for _ in range(kills):
            ready = len(_ready(cluster, task))
            t1 = time.perf_counter()
            cluster.kill_task(task)
            cluster.wait_for(lambda c, n=ready: len(_ready(c, task)) > n, timeout_s=60)
            restarts.append(time.perf_counter() - t1)
            time.sleep(0.2)  # let the new process settle before the next kill
        if cluster.errors() and len(cluster.errors()) != kills:
            msg = f"errors other than the {kills} kills: {cluster.errors()}"
            raise SystemExit(msg)
    finally:
        cluster.stop()
    return {
        "start_s": start_s,
        "restart_s": restarts,
        "cpu_s": _children_cpu() - cpu0,
    }


def steady(fork: bool, sentences: int) -> float:
    """Seconds a cluster takes to count ``sentences`` sentences, start to idle."""
    cluster = LocalCluster(
        FILE,
        {"sbt.sentences": [LONG] * sentences, "sbt.out_dir": tempfile.mkdtemp()},
        options=ClusterOptions(fork_tasks=fork),
        seed=1,
    )
    t0 = time.perf_counter()
    try:
        cluster.start(timeout_s=120)
        if not cluster.run_until_idle(600):
            msg = f"{FILE.name} did not go idle counting {sentences} sentences"
            raise SystemExit(msg)
    finally:
        cluster.stop()
    return time.perf_counter() - t0


def measure(repeat: int, kills: int, sentences: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    order = list(MODES)
    for i in range(repeat):
        for mode in order if i % 2 == 0 else list(reversed(order)):
            run = one_cluster(MODES[mode], kills)
            run["steady_s"] = steady(MODES[mode], sentences)
            runs[mode].append(run)
            print(f"run {i + 1}/{repeat} {mode}: {runs[mode][-1]}", file=sys.stderr)
    summary: dict[str, dict[str, float]] = {}
    for mode, done in runs.items():
        restarts = [r for run in done for r in run["restart_s"]]
        summary[mode] = {
            "start_s": statistics.median(run["start_s"] for run in done),
            "restart_p50_s": statistics.median(restarts),
            "restart_max_s": max(restarts),
            "cpu_s": statistics.median(run["cpu_s"] for run in done),
            "steady_s": statistics.median(run["steady_s"] for run in done),
        }
    return {
        "topology": "sbt_wordcount (6 tasks)",
        "repeat": repeat,
        "kills_per_cluster": kills,
        "sentences": sentences,
        "median": summary,
        "runs": runs,
    }


def markdown(result: dict[str, Any]) -> str:
    med = result["median"]
    rows = []
    labels = {
        "start_s": "cluster start, all 6 tasks ready (s)",
        "restart_p50_s": "killed task back, p50 (s)",
        "restart_max_s": "killed task back, max (s)",
        "cpu_s": "CPU of the cluster's processes (s)",
        "steady_s": f"{result['sentences']:,} sentences counted (s)",
    }
    for key, label in labels.items():
        forked, executed = med["forked"][key], med["executed"][key]
        rows.append(
            [label, f"{forked:.3f}", f"{executed:.3f}", f"{forked / executed:.2f}"]
        )
    head = (
        f"Local-cluster task starts, {result['topology']}, median of "
        f"{result['repeat']} clusters per mode ({result['kills_per_cluster']} "
        "kills each), alternating order\n\n"
    )
    return (
        head
        + table(["measure", "forked", "executed (baseline)", "forked / executed"], rows)
        + "\n"
    )


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (only when plotting)

    fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
    panels = [
        ("start_s", "cluster start (s)"),
        ("restart_s", "killed task back (s)"),
        ("cpu_s", "CPU per cluster (s)"),
        ("steady_s", f"{result['sentences']:,} sentences (s)"),
    ]
    for ax, (key, title) in zip(axes, panels, strict=True):
        data = []
        for mode in MODES:
            runs = result["runs"][mode]
            if key == "restart_s":
                data.append([r for run in runs for r in run[key]])
            else:
                data.append([run[key] for run in runs])
        ax.boxplot(data, tick_labels=list(MODES))
        ax.set_title(title)
        ax.set_ylim(bottom=0)
    fig.suptitle("Local-cluster tasks: forked from the fork server vs executed")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=6, help="clusters per mode (6)")
    parser.add_argument("--kills", type=int, default=5, help="kills per cluster (5)")
    parser.add_argument(
        "--sentences", type=int, default=3000, help="steady run's sentences (3000)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON, not Markdown")
    args = parser.parse_args()
    result = measure(args.repeat, args.kills, args.sentences)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "task_starts.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (RESULTS / "task_starts.md").write_text(text)
    plot(result, RESULTS / "task_starts.png")
    print(json.dumps(result["median"], indent=2) if args.json else text)


if __name__ == "__main__":
    main()
