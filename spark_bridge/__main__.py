"""``python -m spark_bridge FILE`` and ``spark-submit spark_bridge/__main__.py FILE``.

Runs a streamparse topology file on Spark Structured Streaming until its spouts
are idle (or forever with ``--forever``) and writes a JSON report, with the
stateful bolt's final state under ``"state"`` when ``--state`` is given.
Exit status: 0 on success, 2 when the topology cannot run on Spark or failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

if not __package__:
    # Run as a script by spark-submit: make the repository importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _conf_pair(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        msg = f"--conf takes KEY=VALUE, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_bridge",
        description="Run a streamparse topology file on Spark Structured Streaming.",
    )
    parser.add_argument("file", type=Path, help="topology file")
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default: spark-submit's, else local[2])",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="Spark checkpoint and sink (default: .sr3-spark/<topology>)",
    )
    parser.add_argument(
        "--conf",
        type=_conf_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Storm conf override for every component (value parsed as JSON)",
    )
    parser.add_argument("--max-rows-per-batch", type=int, default=1000)
    parser.add_argument(
        "--forever", action="store_true", help="do not stop when spouts are idle"
    )
    parser.add_argument(
        "--state", action="store_true", help="include the final state in the report"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the entry point; return the exit status."""
    from spark_bridge.errors import SparkBridgeError  # noqa: PLC0415 (path fix)
    from spark_bridge.runner import final_state, run_topology  # noqa: PLC0415
    from storm_bridge.errors import TopologyError  # noqa: PLC0415

    args = build_parser().parse_args(argv)
    checkpoint = args.checkpoint_dir or Path(".sr3-spark") / args.file.stem
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # not under spark-submit, which sets the master
    try:
        report = run_topology(
            args.file,
            checkpoint_dir=checkpoint,
            master=master,
            until_idle=not args.forever,
            conf=dict(args.conf),
            max_rows_per_batch=args.max_rows_per_batch,
        )
        if args.state and report["stateful"]:
            report["state"] = final_state(checkpoint, report["stateful"])
    except (SparkBridgeError, TopologyError) as exc:
        sys.stderr.write(f"spark_bridge: {exc}\n")
        return 2
    sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
