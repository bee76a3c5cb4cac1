"""A worker kill on real Apache Storm: does the rollback wait for the lost trees?

Storm fails a tree lost with a dead worker only after
``topology.message.timeout.secs`` (30 s by default; between one and two
timeouts). With the hidden generation field on (what ``sr3 run --engine
apache-storm`` and ``sparse submit`` set in native mode) spouts report a
rollback at once and owners drop those trees' tuples by generation, and the
rollback's warm-up mends every connection between workers before the spouts
resume (so the replay to the next commit loses nothing); with it off
(``-o sr3.storm.generation.field=false``, the baseline) spouts drain every tree
first, as every rollback did before 2026-11-29.

Starts a throw-away lab (ZooKeeper + 3 ring nodes) and an Apache Storm 2.x
cluster from the fetched jars (Nimbus + 1 supervisor, 2 slots), then runs
``topologies/wordcount.py`` (``--lines`` lines, every component at its file's
parallelism) on two workers with native checkpoints every 0.5 s under global
scope (the field off rules out task scope), SIGKILLs worker 0 at ``--kill-at``
seconds, field on and off alternating ``--rounds`` times. Per run, from ``sr3
run --json``'s recovery: Storm's part (kill to the relaunched tasks' rollback),
the restore phase (rollback to resumed: where the drain waits), the replay to
the next commit, the run's length; and whether the committed counts are exact.

Prints a table with the on / off ratio of the medians, writes
bench/results/storm_rollback.{json,md,png}. Not a test.

    .venv/bin/python bench/storm_rollback.py --message-timeout 30
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.storm_apache import ring_and_storm  # noqa: E402 - after the sys.path insert
from bench.storm_scope import median  # noqa: E402 - after the sys.path insert
from sr3_cli.output import table  # noqa: E402 - after the sys.path insert
from storm_bridge.sparse.run import Kill, StormRunOptions, run_on_storm  # noqa: E402 - after the sys.path insert
from storm_bridge.wiring import RingAccess  # noqa: E402 - after the sys.path insert

WORDCOUNT = ROOT / "topologies" / "wordcount.py"
RESULTS = ROOT / "bench" / "results"
FIELD = ("on", "off")
KEYS = ("detect_s", "restore_s", "replay_s", "seconds")


def expected_counts(lines: int) -> dict[str, int]:
    """Word counts of a failure-free run, from the topology's own corpus."""
    sys.path.insert(0, str(WORDCOUNT.parent))
    try:
        import wordcount  # type: ignore[import-not-found]  # noqa: PLC0415 - beside the topology
    finally:
        sys.path.remove(str(WORDCOUNT.parent))
    corpus = wordcount.corpus(lines, 8, 7)
    return dict(Counter(w for line in corpus for w in line.split()))


def one_run(
    ring: RingAccess, nimbus: str, field: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Word count with worker 0 killed, the field ``on`` or ``off``; the row."""
    report = run_on_storm(
        WORDCOUNT,
        ring=ring,
        nimbus=nimbus,
        options=StormRunOptions(
            until_idle=True,
            timeout_s=args.run_timeout,
            kills=[Kill("worker", args.kill_at)],
            generation_field=field == "on",
            conf={
                "wordcount.lines": args.lines,
                "topology.workers": 2,
                "topology.message.timeout.secs": args.message_timeout,
                "sr3.checkpoint.interval.s": 0.5,
                "sr3.recovery.scope": "global",
            },
        ),
        secret_in_conf=False,
    )
    timeline = report["recoveries"][0]["timeline"]
    _epoch, state = ring.committed_state("wordcount", "count")
    counts = {str(key[0]): int(value["n"]) for key, value in state.items()}
    return {
        "field": field,
        "detect_s": timeline["detect_s"],
        "restore_s": timeline["restore_s"],
        "replay_s": timeline["replay_s"],
        "seconds": report["seconds"],
        "rollbacks": report["checkpoints"]["rollbacks"],
        "exact": counts == expected_counts(args.lines),
    }


def summary(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """Rows: measure, field-on median, field-off median, on / off."""
    rows = []
    for key in KEYS:
        on = median([r for r in runs if r["field"] == "on"], key)
        off = median([r for r in runs if r["field"] == "off"], key)
        ratio = f"{on / off:.2f}" if on is not None and off else ""
        rows.append([key, on, off, ratio])
    exact = [sum(r["exact"] for r in runs if r["field"] == f) for f in FIELD]
    total = [sum(r["field"] == f for r in runs) for f in FIELD]
    rows.append(["exact runs", f"{exact[0]}/{total[0]}", f"{exact[1]}/{total[1]}", ""])
    return rows


def plot(runs: list[dict[str, Any]], path: Path, timeout: int) -> None:
    """Stacked bars per run: Storm's part, the restore phase, the replay."""
    import matplotlib  # noqa: PLC0415 - plotting only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - plotting only here

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"field {r['field']}\n#{i + 1}" for i, r in enumerate(runs)]
    bottom = [0.0] * len(runs)
    for key, label in (
        ("detect_s", "Storm: kill to the relaunched tasks' rollback"),
        ("restore_s", "restore: rollback to resumed (the drain waits here)"),
        ("replay_s", "replay: resumed to the next commit"),
    ):
        values = [float(r[key] or 0.0) for r in runs]
        ax.bar(labels, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("seconds after the kill")
    ax.set_title(
        f"worker kill on Storm, topology.message.timeout.secs={timeout}\n"
        "field on: the rollback does not drain; off: it drains"
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--kill-at", type=float, default=2.0)
    parser.add_argument("--message-timeout", type=int, default=30)
    parser.add_argument("--run-timeout", type=float, default=300.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="where the result files go"
    )
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with ring_and_storm("sr3-rb-") as (ring, nimbus, _tmp):
        for field in FIELD * args.rounds:
            runs.append(one_run(ring, nimbus, field, args))
            print(json.dumps(runs[-1]), flush=True)
    headers = ["measure", "field on (median)", "field off (median)", "on / off"]
    text = table(headers, summary(runs))
    print(text)
    results = args.results
    results.mkdir(exist_ok=True)
    shown = {**vars(args), "results": str(results)}
    (results / "storm_rollback.json").write_text(
        json.dumps({"args": shown, "runs": runs}, indent=2) + "\n"
    )
    (results / "storm_rollback.md").write_text(
        "Worker kill on Apache Storm, rollback without the drain (field on) against "
        f"with it (field off) (`bench/storm_rollback.py`, {shown}):\n\n"
        f"```\n{text}\n```\n"
    )
    plot(runs, results / "storm_rollback.png", args.message_timeout)


if __name__ == "__main__":
    main()
