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
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.before_after_benches import BENCHES  # noqa: E402 (after the sys.path insert)
from bench.before_after_report import NAME, RESULTS, markdown, write  # noqa: E402 - after the sys.path insert
from bench.before_after_runs import (  # noqa: E402 - after the sys.path insert
    adapt,
    before_tree,
    git,
    known_options,
    run_once,
)
from bench.before_after_verdicts import summarize  # noqa: E402 - after the sys.path insert

#: The parent of the first issue-15 commit (9efb05c, "fields grouping sends each
#: value where Storm 2.8.3's own FieldsGrouper does", the issue's first "must
#: show" item), which was followed by the config table (79ac0a2) and the backend
#: layer (8cd3843). bccac1e is the last commit of the session that filed issue
#: 15: it only turned a test skip into a failure and reworded polling sleeps.
BASELINE = "bccac1e"


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
        "after_commit": git("rev-parse", "HEAD"),
        "after_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "repeats": args.repeats,
        "cores": os.cpu_count(),
        "load_start": list(load_start),
        "load_end": list(os.getloadavg()),
        "options": options,
        "dropped_options": dropped,
        "runs": runs,
        "rows": summarize(runs, benches),
    }


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
