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
import tempfile
from pathlib import Path

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from sr3_cli.output import table
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sr3-bench-") as tmp:
        lab = Lab(root=Path(tmp))
        lab.save()
        lab.start_zookeeper()
        try:
            lab.add_nodes(3)
            lab.start_nodes(sorted(lab.nodes), log_level="WARNING")
            wait_for_members(lab, 3)
            results = measure(lab, args)
        finally:
            lab.stop_nodes()
            lab.stop_zookeeper()
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
