"""``sr3 run`` and ``sr3 state``: running topology files and reading their state."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.cluster import add_cluster_args, cluster_config
from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from sr3_cli.output import emit_json, table
from storm_bridge.runner import NodeKill, RunOptions, RunReport, TaskKill, run_topology
from storm_bridge.wiring import RingAccess

__all__ = ["add_parsers", "parse_kill", "parse_node_kill"]

EMBEDDED_NODES = 3
E_SPARK = (
    "--engine spark is not available yet: the Spark bridge is still being built; "
    "run with --engine storm (the default)"
)


def parse_kill(text: str) -> TaskKill:
    """Parse ``COMPONENT:INDEX@SECONDS``.

    Raises:
        ConfigError: the text does not have that form.
    """
    try:
        target, at = text.rsplit("@", 1)
        component, index = target.rsplit(":", 1)
        return TaskKill(component, int(index), float(at))
    except ValueError as exc:
        msg = f"--kill {text!r}: write COMPONENT:INDEX@SECONDS, as count:0@2.5"
        raise ConfigError(msg) from exc


def parse_node_kill(text: str) -> NodeKill:
    """Parse ``NODE@SECONDS``.

    Raises:
        ConfigError: the text does not have that form.
    """
    try:
        node, at = text.rsplit("@", 1)
        return NodeKill(node, float(at))
    except ValueError as exc:
        msg = f"--kill-node {text!r}: write NODE@SECONDS, as node-2@3"
        raise ConfigError(msg) from exc


def _parse_conf(items: list[str]) -> dict[str, Any]:
    conf: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            msg = f"-o {item!r}: write KEY=VALUE (VALUE as JSON, or a plain string)"
            raise ConfigError(msg)
        try:
            conf[key] = json.loads(raw)
        except json.JSONDecodeError:
            conf[key] = raw
    return conf


@dataclass
class _Target:
    config: Sr3Config
    lab: Lab | None


@contextmanager
def _embedded_lab() -> Iterator[_Target]:
    root = Path(tempfile.mkdtemp(prefix="sr3-run-"))
    lab = Lab(root=root)
    lab.save()
    try:
        lab.start_zookeeper()
        lab.add_nodes(EMBEDDED_NODES)
        lab.start_nodes(sorted(lab.nodes), log_level="WARNING")
        wait_for_members(lab, EMBEDDED_NODES)
        yield _Target(lab.config(Sr3Config.from_env()), lab)
    finally:
        lab.stop_nodes()
        lab.stop_zookeeper()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _target(args: argparse.Namespace) -> Iterator[_Target]:
    if args.zk or args.lab or os.environ.get("SR3_LAB"):
        config = cluster_config(args)
        lab_dir = args.lab or os.environ.get("SR3_LAB")
        lab = Lab.load(Path(lab_dir).resolve()) if lab_dir and not args.zk else None
        yield _Target(config, lab)
        return
    with _embedded_lab() as target:
        yield target


def run(args: argparse.Namespace) -> int:
    """``sr3 run``: run a topology file on the local cluster."""
    if args.engine == "spark":
        raise ConfigError(E_SPARK)
    options = RunOptions(
        until_idle=args.until_idle,
        duration_s=args.duration,
        kills=[parse_kill(k) for k in args.kill],
        node_kills=[parse_node_kill(k) for k in args.kill_node],
        conf=_parse_conf(args.conf),
        serializer=args.serializer,
        timeout_s=args.timeout,
        checkpoints=not args.no_checkpoints,
        resume=args.resume,
    )
    if not options.until_idle and options.duration_s is None:
        msg = "sr3 run needs --until-idle or --duration S (or both)"
        raise ConfigError(msg)
    with _target(args) as target:
        lab = target.lab
        kill_node = None if lab is None else (lambda node: lab.kill_nodes([node]))
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
        _print_report(report)
    if options.until_idle and not report.idle:
        return 1
    return 0


def _print_report(report: RunReport) -> None:
    data = report.to_dict()
    tp = data["throughput"]
    print(
        f"topology {data['topology']}: {data['seconds']} s, "
        f"{tp['tuples_per_s']} tuples/s processed by bolts "
        f"({tp['bolt_tuples']} tuples; spouts {tp['spout_tuples_per_s']}/s)"
    )
    cp = data["checkpoints"]
    print(
        f"checkpoints: {cp.get('count', 0)} committed, last epoch "
        f"{cp.get('last_committed_epoch')}, mean {cp.get('mean_duration_s')} s "
        f"(interval {cp.get('interval_s')} s)"
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


def state_dump(args: argparse.Namespace) -> int:
    """``sr3 state dump``: the last committed state of a component.

    Prints ``{key: {name: value}}`` as JSON, each key a JSON list of its values
    (with or without ``--json``; without it, a summary line goes to stderr).
    """
    ring = RingAccess(cluster_config(args))
    try:
        epoch, state = ring.committed_state(args.topology, args.component)
    finally:
        ring.close()
    rows = {
        json.dumps(list(key)): fields
        for key, fields in sorted(state.items(), key=lambda kv: json.dumps(kv[0]))
    }
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


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the topology subcommands to the ``sr3`` parser."""
    p = sub.add_parser("run", help="run a topology file on the local cluster")
    p.add_argument("file", help="topology file (its stem is the topology name)")
    p.add_argument("--engine", choices=["storm", "spark"], default="storm")
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="stop when spouts are dry, all is processed and a final epoch committed",
    )
    p.add_argument("--duration", type=float, default=None, help="seconds to run")
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
        "--timeout", type=float, default=600.0, help="bound of --until-idle (600 s)"
    )
    p.add_argument(
        "--no-checkpoints", action="store_true", help="plain Storm (at-least-once)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last committed epoch (default: empty state)",
    )
    add_cluster_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)

    state = sub.add_parser("state", help="committed state of topologies")
    state_sub = state.add_subparsers(dest="state_command", required=True)
    dump = state_sub.add_parser("dump", help="print a component's committed state")
    dump.add_argument("--topology", required=True)
    dump.add_argument("--component", required=True)
    add_cluster_args(dump)
    dump.add_argument("--json", action="store_true")
    dump.set_defaults(handler=state_dump)
