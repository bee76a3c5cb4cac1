"""``sr3 run`` and ``sr3 state``: running topology files and reading their state."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sr3.errors import ConfigError
from sr3_cli.argtypes import at_least, nonempty, positive_seconds
from sr3_cli.cluster import add_cluster_args, checked_config
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.lab import Lab
from sr3_cli.output import JSON_HELP, emit_json
from sr3_cli.run_checks import (
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_kill,
    parse_node_kill,
    start_point,
)
from sr3_cli.run_report import print_run_report

# embedded_lab moved to sr3_cli.run_target; re-exported here because
# sr3_cli/compare.py and sr3_cli/chaos_cmd.py import it from this module.
from sr3_cli.run_target import embedded_lab, run_target
from sr3_cli.spark_run_cmd import run_spark
from sr3_cli.storm_run_cmd import run_apache_storm
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess

__all__ = ["add_parsers", "embedded_lab", "parse_kill", "parse_node_kill"]


def run(args: argparse.Namespace) -> int:
    """``sr3 run``: run a topology file on the local cluster, Spark or Storm."""
    if start_point(args) is not None and args.engine == "apache-storm":
        msg = (
            "--from-savepoint and --from-epoch run on --engine storm and "
            "--engine spark; start on one of them, or use --resume"
        )
        raise ConfigError(msg)
    if start_point(args) is not None and args.no_checkpoints:
        msg = (
            "--from-savepoint and --from-epoch restore checkpointed state; "
            "drop --no-checkpoints"
        )
        raise ConfigError(msg)
    if args.engine == "spark":
        return run_spark(args)
    if args.engine == "apache-storm":
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
        start_from=start_point(args),
    )
    if not options.until_idle and options.duration_s is None:
        msg = "sr3 run needs --until-idle or --duration S (or both)"
        raise ConfigError(msg)
    with run_target(args) as target:
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
        print_run_report(report.to_dict())
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
