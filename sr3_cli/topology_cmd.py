"""``sr3 run``: run a topology file (``sr3 state dump``: :mod:`sr3_cli.state_cmd`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace

from sr3.errors import ConfigError
from sr3_cli.args.common import Handler, handler
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.lab import Lab
from sr3_cli.output import emit_json
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
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess

__all__ = ["embedded_lab", "parse_kill", "parse_node_kill", "run"]

#: The other engines' runs, imported when chosen: a local-cluster run (the
#: tests start hundreds) never loads the Apache Storm or Spark commands.
_ENGINES: dict[str, Handler] = {
    "spark": handler("sr3_cli.spark_run_cmd:run_spark"),
    "apache-storm": handler("sr3_cli.storm_run_cmd:run_apache_storm"),
}


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
    engine = _ENGINES.get(args.engine)
    if engine is not None:
        return engine(args)
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
