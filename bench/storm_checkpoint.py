"""Word count throughput with global checkpoints every second versus none.

Runs ``topologies/wordcount.py`` on the local multilang cluster against an
embedded lab (ZooKeeper + 3 ring nodes), with the JSON and msgpack multilang
serializers, and prints bolt tuples/s and the overhead ratio of checkpointing.

    .venv/bin/python bench/storm_checkpoint.py --lines 20000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402
from sr3_cli.output import table  # noqa: E402
from storm_bridge.runner import RunOptions, run_topology  # noqa: E402
from storm_bridge.wiring import RingAccess  # noqa: E402

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with bench_lab(3) as lab:
        results = measure(lab, args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    rows = []
    for serializer in ("json", "msgpack"):
        off = results[serializer]["off"]
        on = results[serializer]["on"]
        rows.append(
            [
                serializer,
                f"{off['tuples_per_s']:.0f}",
                f"{on['tuples_per_s']:.0f}",
                f"{off['tuples_per_s'] / on['tuples_per_s']:.3f}",
                on["checkpoints"],
                on["mean_checkpoint_s"],
            ]
        )
    headers = [
        "serializer",
        "off tuples/s",
        f"every {args.interval:g} s tuples/s",
        "overhead (off/on)",
        "checkpoints",
        "mean checkpoint s",
    ]
    print(f"wordcount, {args.lines} lines, median of {args.repeats} runs")
    print(table(headers, rows))


def measure(lab: Lab, args: argparse.Namespace) -> dict[str, dict[str, dict]]:
    ring = RingAccess(lab.config())
    results: dict[str, dict[str, dict]] = {}
    try:
        for serializer in ("json", "msgpack"):
            results[serializer] = {}
            for mode in ("off", "on"):
                rates, counts, means = [], [], []
                for _ in range(args.repeats):
                    options = RunOptions(
                        until_idle=True,
                        conf={
                            "wordcount.lines": args.lines,
                            "sr3.checkpoint.interval.s": args.interval,
                        },
                        serializer=serializer,
                        checkpoints=mode == "on",
                    )
                    report = run_topology(WORDCOUNT, ring=ring, options=options)
                    data = report.to_dict()
                    rates.append(data["throughput"]["tuples_per_s"])
                    counts.append(data["checkpoints"].get("count", 0))
                    means.append(data["checkpoints"].get("mean_duration_s") or 0.0)
                results[serializer][mode] = {
                    "tuples_per_s": statistics.median(rates),
                    "runs": rates,
                    "checkpoints": statistics.median(counts),
                    "mean_checkpoint_s": round(statistics.median(means), 4),
                }
    finally:
        ring.close()
    return results


if __name__ == "__main__":
    main()
