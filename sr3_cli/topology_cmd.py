"""``sr3 run`` and ``sr3 state``: running topology files and reading their state."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.committer import StartPoint
from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.argtypes import at_least, nonempty, positive_seconds
from sr3_cli.cluster import add_cluster_args, checked_config
from sr3_cli.commands import wait_for_members
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.lab import Lab
from sr3_cli.output import JSON_HELP, emit_json, table
from sr3_cli.run_checks import (
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_kill,
    parse_node_kill,
)
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess

__all__ = ["add_parsers", "embedded_lab", "parse_kill", "parse_node_kill"]

#: Distinct task errors the text report lists (``--json`` has them all).
_ERRORS_SHOWN = 3

EMBEDDED_NODES = 3
#: Options only the Storm engine's local cluster understands.
_STORM_ONLY = (
    ("kill", "--kill (Spark retries its own tasks; use --kill-node)"),
    ("no_checkpoints", "--no-checkpoints"),
)


@dataclass
class _Target:
    config: Sr3Config
    lab: Lab | None


@contextmanager
def embedded_lab(nodes: int = EMBEDDED_NODES) -> Iterator[Lab]:
    """Run a throw-away lab (ZooKeeper and ``nodes`` ring nodes) in a temp dir."""
    root = Path(tempfile.mkdtemp(prefix="sr3-run-"))
    lab = Lab(root=root)
    lab.save()
    try:
        lab.start_zookeeper()
        lab.add_nodes(nodes)
        lab.start_nodes(sorted(lab.nodes), log_level="WARNING")
        wait_for_members(lab, nodes)
        yield lab
    finally:
        Lab.load(root).stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _target(args: argparse.Namespace) -> Iterator[_Target]:
    if args.zk or args.lab or os.environ.get("SR3_LAB"):
        config = checked_config(args)
        lab_dir = args.lab or os.environ.get("SR3_LAB")
        lab = Lab.load(Path(lab_dir).resolve()) if lab_dir and not args.zk else None
        yield _Target(config, lab)
        return
    with embedded_lab() as lab:
        yield _Target(lab.config(Sr3Config.from_env()), lab)


def _run_spark(args: argparse.Namespace) -> int:
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
        with _target(args) as target:
            lab = target.lab
            if node_kills and lab is None:
                msg = "--kill-node needs a lab whose nodes this run can kill"
                raise ConfigError(msg)
            if lab is not None:
                check_node_ids((k.node for k in node_kills), lab.nodes)
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
                    start_from=_start_point(args),
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
        _print_report(report)
    if args.until_idle and not report["idle"] and args.max_batches is None:
        return 1
    return 0


def _start_point(args: argparse.Namespace) -> StartPoint | None:
    """Return where ``--from-savepoint``/``--from-epoch`` start the run, or None."""
    if args.from_savepoint is None and args.from_epoch is None:
        return None
    return StartPoint(savepoint=args.from_savepoint, epoch=args.from_epoch)


def run(args: argparse.Namespace) -> int:
    """``sr3 run``: run a topology file on the local cluster, Spark or Storm."""
    if _start_point(args) is not None and args.engine == "apache-storm":
        msg = (
            "--from-savepoint and --from-epoch run on --engine storm and "
            "--engine spark; start on one of them, or use --resume"
        )
        raise ConfigError(msg)
    if _start_point(args) is not None and args.no_checkpoints:
        msg = (
            "--from-savepoint and --from-epoch restore checkpointed state; "
            "drop --no-checkpoints"
        )
        raise ConfigError(msg)
    if args.engine == "spark":
        return _run_spark(args)
    if args.engine == "apache-storm":
        from sr3_cli.storm_run_cmd import run_apache_storm  # noqa: PLC0415 (cycle)

        return run_apache_storm(args)
    for flag, items in (
        ("--kill-worker", args.kill_worker),
        ("--kill-supervisor", args.kill_supervisor),
    ):
        if items:
            msg = f"{flag} is an --engine apache-storm option"
            raise ConfigError(msg)
    check_topology_file(args.file)
    options = RunOptions(
        until_idle=args.until_idle,
        duration_s=args.duration,
        kills=[parse_kill(k) for k in args.kill],
        node_kills=[parse_node_kill(k) for k in args.kill_node],
        conf=parse_conf(args.conf),
        serializer=args.serializer,
        timeout_s=args.timeout,
        checkpoints=not args.no_checkpoints,
        resume=args.resume,
        environment=args.environment,
        start_from=_start_point(args),
    )
    if not options.until_idle and options.duration_s is None:
        msg = "sr3 run needs --until-idle or --duration S (or both)"
        raise ConfigError(msg)
    with _target(args) as target:
        lab = target.lab
        if lab is not None:
            check_node_ids((k.node for k in options.node_kills), lab.nodes)
            options = replace(options, metrics_targets=targets_dir(lab.root))
        kill_node = None if lab is None else _node_killer(lab)
        ring = RingAccess(target.config)
        try:
            report = run_topology(
                args.file, ring=ring, options=options, kill_node=kill_node
            )
        finally:
            ring.close()
    if args.json:
        emit_json(report.to_dict())
    else:
        _print_report(report.to_dict())
    # a task that never came back or kept crashing is no success, whatever
    # else the run did (one that came back after its own death is reported)
    for line in report.failed_tasks:
        print(f"sr3 run: {line}", file=sys.stderr)
    if report.failed_tasks:
        return 1
    if options.until_idle and not report.idle:
        return 1
    return 0


def _node_killer(lab: Lab) -> Callable[[str], None]:
    def kill(node: str) -> None:
        lab.kill_nodes([node])

    return kill


def _print_report(data: dict[str, Any]) -> None:
    tp = data["throughput"]
    engine = data.get("engine", "storm")
    if engine == "spark":
        batches = data["micro_batches"]
        lat = batches["latency_ms"]
        print(
            f"topology {data['topology']} on Spark ({data['master']}): "
            f"{data['seconds']} s, {tp['spout_tuples_per_s']} spout tuples/s "
            f"({tp['spout_tuples']} tuples; Spark session start "
            f"{data['session_start_s']} s not counted), started from "
            f"{data['started_from']}"
        )
        print(
            f"micro-batches: {batches['count']}, latency p50 {lat['p50']} ms, "
            f"p99 {lat['p99']} ms; SR3 ring writes {batches['sr3_seconds']} s "
            f"({batches['sr3_share']} of batch time)"
        )
    else:
        print(
            f"topology {data['topology']}: {data['seconds']} s, "
            f"{tp['tuples_per_s']} tuples/s processed by bolts "
            f"({tp['bolt_tuples']} tuples; spouts {tp['spout_tuples_per_s']}/s)"
        )
    cp = data["checkpoints"]
    print(
        f"checkpoints: {cp.get('count', 0)} committed, last epoch "
        f"{cp.get('last_committed_epoch')}, mean {cp.get('mean_duration_s')} s "
        f"(interval {cp.get('interval_s', 'one per micro-batch')} s)"
    )
    rows = [
        [
            r["cause"],
            r["at_s"],
            f"{r['mechanism']} ({r['used']})",
            r["timeline"]["detect_s"],
            r["timeline"]["restore_s"],
            r["timeline"]["replay_s"],
        ]
        for r in data["recoveries"]
    ]
    if rows:
        headers = [
            "recovery of",
            "at s",
            "mechanism",
            "detect s",
            "restore s",
            "replay s",
        ]
        print(table(headers, rows))
    else:
        print("recoveries: none")
    for name, summary in data["state"].items():
        print(f"state {name}: {summary['keys']} keys at epoch {summary['epoch']}")
    if data["error_count"]:
        print(f"errors reported by tasks: {data['error_count']} (see --json)")
        for error in list(dict.fromkeys(data.get("errors", [])))[:_ERRORS_SHOWN]:
            print(f"  {error}")
    dead = data.get("dead_letters", {}).get("count", 0)
    if dead:
        print(f"dead letters: {dead} (see --json)")
    for failure in data.get("task_failures", []):
        if failure["outcome"] == "recovered":  # the others go to stderr
            print(failure["message"])
    if data.get("busy"):
        print(f"not idle: {data['busy']}")


def state_dump(args: argparse.Namespace) -> int:
    """``sr3 state dump``: the last committed state of a component.

    Prints ``{key: {name: value}}`` as JSON, each key a JSON list of its values
    (with or without ``--json``; without it, a summary line goes to stderr).
    """
    ring = RingAccess(checked_config(args, create=False), create=False)
    try:
        epoch, rows = ring.committed_dump(args.topology, args.component)
    finally:
        ring.close()
    if args.json:
        emit_json(rows)
        return 0
    print(
        f"# {args.topology}/{args.component}: {len(rows)} keys at committed "
        f"epoch {epoch}",
        file=sys.stderr,
    )
    emit_json(rows)
    return 0


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add the topology subcommands to the ``sr3`` parser."""
    p = sub.add_parser(
        "run", help="run a topology file on the local Storm cluster or on Spark"
    )
    p.add_argument("file", help="topology file (its stem is the topology name)")
    p.add_argument(
        "--engine",
        choices=["storm", "spark", "apache-storm"],
        default="storm",
        help="storm: our local multilang cluster; spark; apache-storm: a real "
        "Storm cluster (the lab's, or --nimbus)",
    )
    p.add_argument(
        "--nimbus",
        default=None,
        metavar="HOST:PORT",
        help="Nimbus of the Storm cluster (--engine apache-storm; default: the lab's)",
    )
    p.add_argument(
        "--kill-worker",
        action="extend",
        nargs="+",
        default=[],
        metavar="INDEX@SECONDS",
        help="SIGKILL worker JVM INDEX (by slot port) (--engine apache-storm)",
    )
    p.add_argument(
        "--kill-supervisor",
        action="extend",
        nargs="+",
        default=[],
        metavar="INDEX@SECONDS",
        help="SIGKILL the lab's supervisor INDEX, then restart it "
        "(--engine apache-storm)",
    )
    p.add_argument(
        "--master", default="local[2]", help="Spark master (--engine spark; local[2])"
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="Spark checkpoint and sink dir (--engine spark; default: a fresh one)",
    )
    p.add_argument(
        "--max-batches",
        type=at_least(1),
        default=None,
        help="stop once this many micro-batches committed (--engine spark)",
    )
    p.add_argument(
        "--max-rows-per-batch",
        type=at_least(1),
        default=1000,
        help="spout tuples per micro-batch (--engine spark; 1000)",
    )
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="stop when spouts are dry, all is processed and a final epoch committed",
    )
    p.add_argument(
        "--duration", type=positive_seconds, default=None, help="seconds to run"
    )
    p.add_argument(
        "--kill",
        action="extend",
        nargs="+",
        default=[],
        metavar="COMPONENT:INDEX@SECONDS",
        help="SIGKILL task INDEX of COMPONENT at a moment (several allowed)",
    )
    p.add_argument(
        "--kill-node",
        action="extend",
        nargs="+",
        default=[],
        metavar="NODE@SECONDS",
        help="SIGKILL a ring node of the lab at a moment (several allowed)",
    )
    p.add_argument(
        "-o",
        dest="conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Storm conf override, as sparse -o (repeatable)",
    )
    p.add_argument("--serializer", choices=["json", "msgpack"], default="json")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        help="bound of --until-idle (600 s)",
    )
    p.add_argument(
        "--no-checkpoints", action="store_true", help="plain Storm (at-least-once)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last committed epoch (default: empty state)",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-savepoint",
        type=nonempty,
        default=None,
        metavar="NAME",
        help="start from savepoint NAME of the topology (sr3 savepoint list): its "
        "state and spout offsets, as --resume does (--engine storm or spark)",
    )
    start.add_argument(
        "--from-epoch",
        type=at_least(0),
        default=None,
        metavar="N",
        help="start from epoch N while its manifests exist (the committed epoch "
        "or a savepoint's), as --resume does (--engine storm or spark)",
    )
    p.add_argument(
        "-e",
        "--environment",
        type=nonempty,
        help="pick parallelism given per environment (par={'prod': 4}), as sparse -e",
    )
    add_cluster_args(p)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(handler=run)

    state = sub.add_parser("state", help="committed state of topologies")
    state_sub = state.add_subparsers(dest="state_command", required=True)
    dump = state_sub.add_parser("dump", help="print a component's committed state")
    dump.add_argument("--topology", required=True, type=nonempty)
    dump.add_argument("--component", required=True, type=nonempty)
    add_cluster_args(dump)
    dump.add_argument("--json", action="store_true", help=JSON_HELP)
    dump.set_defaults(handler=state_dump)
