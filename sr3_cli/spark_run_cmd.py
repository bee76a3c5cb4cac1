"""``sr3 run FILE --engine spark``: the topology as a Structured Streaming query."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
from pathlib import Path

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.output import emit_json
from sr3_cli.run_checks import (
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_node_kill,
    start_point,
)
from sr3_cli.run_report import print_run_report
from sr3_cli.run_target import run_target
from storm_bridge.wiring import RingAccess

__all__ = ["run_spark"]

#: Options only the Storm engine's local cluster understands.
_STORM_ONLY = (
    ("kill", "--kill (Spark retries its own tasks; use --kill-node)"),
    ("no_checkpoints", "--no-checkpoints"),
)


def run_spark(args: argparse.Namespace) -> int:
    """``sr3 run --engine spark``: the same topology as a Structured Streaming query."""
    from spark_bridge.runner import run_topology as run_on_spark  # noqa: PLC0415

    for attr, flag in _STORM_ONLY:
        if getattr(args, attr):
            msg = f"{flag} is a Storm-engine option; drop it with --engine spark"
            raise ConfigError(msg)
    if not args.until_idle and args.duration is None and args.max_batches is None:
        msg = "sr3 run needs --until-idle, --duration S or --max-batches N"
        raise ConfigError(msg)
    check_topology_file(args.file)
    node_kills = [parse_node_kill(k) for k in args.kill_node]
    conf = parse_conf(args.conf)
    checkpoint = args.checkpoint_dir
    if checkpoint is not None and Path(checkpoint).exists():
        if not Path(checkpoint).is_dir():
            msg = f"--checkpoint-dir {checkpoint} is a file; give a directory"
            raise ConfigError(msg)
    scratch = None
    if checkpoint is None:
        scratch = tempfile.mkdtemp(prefix="sr3-spark-")
        checkpoint = scratch
    try:
        with run_target(args) as target:
            lab = target.lab
            if node_kills and lab is None:
                msg = "--kill-node needs a lab whose nodes this run can kill"
                raise ConfigError(msg)
            if lab is not None:
                check_node_ids((k.node for k in node_kills), lab.nodes)
                driver = lab_netns.driver_address(lab, args.master)
                if driver is not None:  # executors on the lab's hosts connect back
                    os.environ["SPARK_LOCAL_IP"] = driver
            timers = [
                threading.Timer(k.at_s, lab.kill_nodes, args=([k.node],))
                for k in node_kills
                if lab is not None
            ]
            ring = RingAccess(target.config)
            try:
                for timer in timers:
                    timer.daemon = True
                    timer.start()
                report = run_on_spark(
                    args.file,
                    checkpoint_dir=checkpoint,
                    master=args.master,
                    until_idle=args.until_idle,
                    duration_s=args.duration,
                    conf=conf,
                    max_rows_per_batch=args.max_rows_per_batch,
                    ring=ring,
                    resume=args.resume,
                    stop_after_batches=args.max_batches,
                    environment=args.environment,
                    start_from=start_point(args),
                    metrics_targets=None if lab is None else targets_dir(lab.root),
                )
            finally:
                for timer in timers:
                    timer.cancel()
                ring.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        emit_json(report)
    else:
        print_run_report(report)
    if args.until_idle and not report["idle"] and args.max_batches is None:
        return 1
    return 0
