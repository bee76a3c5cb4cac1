"""``python -m spark_bridge FILE`` and ``spark-submit spark_bridge/__main__.py FILE``.

Runs a streamparse topology file on Spark Structured Streaming until its spouts
are idle (or forever with ``--forever``) and writes a JSON report (the report of
``sr3 run --engine spark --json``). With ``--zk HOST:PORT`` the SR3 ring is the
recovery core: state is written to the ring every micro-batch and, when the
checkpoint directory is missing or empty, restored from the ring's committed
epoch, whichever engine committed it (``--fresh`` starts from empty state
instead, committing an empty epoch). With
``--state`` the report carries each stateful bolt's final state under
``"final_state"`` (from the ring with ``--zk``, else from the sink). Any master
works (``local[*]``, ``spark://``, YARN, Kubernetes) as long as the topology
file and this repository are readable at the same paths on the executors::

    spark-submit --master spark://127.0.0.1:7077 spark_bridge/__main__.py \
        topologies/wordcount.py --zk 127.0.0.1:2181 --secret-file LAB/secret

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
    parser.add_argument(
        "-e",
        "--environment",
        default=None,
        help="environment picking per-environment parallelism (par={ENV: n})",
    )
    parser.add_argument("--max-rows-per-batch", type=int, default=1000)
    parser.add_argument(
        "--forever", action="store_true", help="do not stop when spouts are idle"
    )
    parser.add_argument(
        "--state", action="store_true", help="include the final state in the report"
    )
    parser.add_argument(
        "--zk", default=None, help="ZooKeeper HOST:PORT of the SR3 ring (optional)"
    )
    parser.add_argument("--chroot", default=None, help="ring root znode (/sr3/default)")
    parser.add_argument(
        "--secret-file", default=None, help="ring secret (default: $SR3_NODE_SECRET)"
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--resume",
        action="store_true",
        help="on an empty checkpoint, restore the ring's committed epoch (default)",
    )
    start.add_argument(
        "--fresh",
        action="store_true",
        help="on an empty checkpoint, start from empty state instead",
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds"
    )
    parser.add_argument(
        "--max-batches",
        type=int,
        default=None,
        help="stop once this many micro-batches committed (a partial run)",
    )
    return parser


def _ring(args: argparse.Namespace) -> Any:
    """Return RingAccess for ``--zk`` (None without it)."""
    from dataclasses import replace  # noqa: PLC0415

    from backend.access import RingAccess  # noqa: PLC0415
    from sr3.config import Sr3Config  # noqa: PLC0415
    from sr3.errors import ConfigError  # noqa: PLC0415

    if not args.zk:
        return None
    base = Sr3Config.from_env()
    secret = os.environ.get("SR3_NODE_SECRET", base.node.secret)
    if args.secret_file:
        try:
            secret = Path(args.secret_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            msg = f"cannot read --secret-file {args.secret_file}: {exc}"
            raise ConfigError(msg) from exc
    zk = replace(base.zk, hosts=args.zk, chroot=args.chroot or base.zk.chroot)
    return RingAccess(replace(base, zk=zk, node=replace(base.node, secret=secret)))


def main(argv: list[str] | None = None) -> int:
    """Run the entry point; return the exit status."""
    from spark_bridge.errors import SparkBridgeError  # noqa: PLC0415 (path fix)
    from spark_bridge.runner import final_state, run_topology  # noqa: PLC0415
    from sr3.errors import SR3Error  # noqa: PLC0415
    from topology_api.errors import TopologyError  # noqa: PLC0415

    args = build_parser().parse_args(argv)
    checkpoint = args.checkpoint_dir or Path(".sr3-spark") / args.file.stem
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # not under spark-submit, which sets the master
    ring = None
    try:
        ring = _ring(args)
        report = run_topology(
            args.file,
            checkpoint_dir=checkpoint,
            master=master,
            until_idle=not args.forever,
            duration_s=args.duration,
            conf=dict(args.conf),
            max_rows_per_batch=args.max_rows_per_batch,
            ring=ring,
            resume=not args.fresh,
            stop_after_batches=args.max_batches,
            environment=args.environment,
        )
        if args.state:
            report["final_state"] = {
                name: _state(ring, report["topology"], name, checkpoint, final_state)
                for name in report["state"]
            }
    except (SparkBridgeError, TopologyError, SR3Error) as exc:
        sys.stderr.write(f"spark_bridge: {exc}\n")
        return 2
    finally:
        if ring is not None:
            ring.close()
    sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return 0


def _state(
    ring: Any, topology: str, component: str, checkpoint: Path, from_sink: Any
) -> dict[str, Any]:
    if ring is None:
        return dict(from_sink(checkpoint, component))
    _epoch, rows = ring.committed_dump(topology, component)
    return dict(rows)


if __name__ == "__main__":
    sys.exit(main())
