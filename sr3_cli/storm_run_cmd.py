"""``sr3 run FILE --engine apache-storm``: the topology on a real Storm cluster.

The cluster is the lab's (``sr3 lab up --storm``; ``--lab`` or ``SR3_LAB``) or
any Nimbus given with ``--nimbus HOST:PORT`` whose workers run on this machine
and reach the ring's ZooKeeper. Submission goes the way of ``sparse submit``
(:mod:`storm_bridge.sparse.submit`); the report has the other engines' shape.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sr3.errors import ConfigError
from sr3_cli.lab import Lab
from sr3_cli.output import emit_json
from sr3_cli.run_checks import (
    _check_moment,
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_kill,
    parse_node_kill,
)
from sr3_cli.run_report import print_run_report
from sr3_cli.run_target import run_target
from storm_bridge.sparse.run import Kill, StormRunOptions, Supervisors, run_on_storm
from storm_bridge.wiring import RingAccess

__all__ = ["parse_index_kill", "run_apache_storm"]

E_NO_CLUSTER = (
    "--engine apache-storm needs a Storm cluster: start the lab's with "
    "`sr3 lab up --storm` (then --lab DIR or SR3_LAB), or pass --nimbus HOST:PORT"
)


def parse_index_kill(flag: str, text: str) -> tuple[int, float]:
    """Parse ``INDEX@SECONDS`` of ``--kill-worker`` / ``--kill-supervisor``.

    Raises:
        ConfigError: the text does not have that form.
    """
    try:
        index, at = text.rsplit("@", 1)
        parsed = (int(index), float(at))
    except ValueError as exc:
        msg = f"{flag} {text!r}: write INDEX@SECONDS, as 0@5"
        raise ConfigError(msg) from exc
    if parsed[0] < 0:
        msg = f"{flag} {text!r}: INDEX counts from 0"
        raise ConfigError(msg)
    _check_moment(flag, text, parsed[1])
    return parsed


def _kills(args: argparse.Namespace) -> list[Kill]:
    kills = [
        Kill("task", k.at_s, index=k.index, component=k.component)
        for k in (parse_kill(t) for t in args.kill)
    ]
    kills += [
        Kill("node", k.at_s, node=k.node)
        for k in (parse_node_kill(t) for t in args.kill_node)
    ]
    for flag, kind, items in (
        ("--kill-worker", "worker", args.kill_worker),
        ("--kill-supervisor", "supervisor", args.kill_supervisor),
    ):
        for text in items:
            index, at_s = parse_index_kill(flag, text)
            kills.append(Kill(kind, at_s, index=index))
    return kills


def _lab_storm(lab: Lab | None) -> Any:
    if lab is None:
        return None
    from sr3_cli.lab_storm import storm_cluster  # noqa: PLC0415 (Storm on demand)

    return storm_cluster(lab)


def run_apache_storm(args: argparse.Namespace) -> int:
    """Run ``args.file`` on Apache Storm; print the report; return the exit code."""
    if args.no_checkpoints:
        msg = "--no-checkpoints: on Apache Storm, runs always checkpoint (native)"
        raise ConfigError(msg)
    if not args.until_idle and args.duration is None:
        msg = "sr3 run needs --until-idle or --duration S (or both)"
        raise ConfigError(msg)
    if getattr(args, "environment", None):
        msg = (
            "-e/--environment is for --engine storm and spark; on Apache Storm, "
            "give the components their parallelism in the topology file"
        )
        raise ConfigError(msg)
    check_topology_file(args.file)
    kills = _kills(args)
    options = StormRunOptions(
        until_idle=args.until_idle,
        duration_s=args.duration,
        kills=kills,
        conf=parse_conf(args.conf),
        serializer=args.serializer,
        timeout_s=args.timeout,
        resume=args.resume,
    )
    with run_target(args) as target:
        lab = target.lab
        cluster = _lab_storm(lab)
        nimbus = args.nimbus or (cluster.nimbus if cluster is not None else None)
        if nimbus is None:
            raise ConfigError(E_NO_CLUSTER)
        if lab is not None:
            check_node_ids((k.node for k in kills if k.kind == "node"), lab.nodes)
        supervisors: Supervisors | None = cluster if args.nimbus is None else None
        kill_node = None
        if lab is not None:
            lab_ = lab

            def kill_node(node: str) -> None:
                lab_.kill_nodes([node])

        ring = RingAccess(target.config)
        try:
            report = run_on_storm(
                args.file,
                ring=ring,
                nimbus=nimbus,
                options=options,
                supervisors=supervisors,
                kill_node=kill_node,
                # the lab's workers get the ring secret in their environment
                secret_in_conf=supervisors is None,
            )
        finally:
            ring.close()
    if args.json:
        emit_json(report)
    else:
        print_run_report(report)
        print(f"on Apache Storm: Nimbus {report['nimbus']}, {report['topology_id']}")
    if args.until_idle and not report["idle"]:
        print(f"sr3 run: not idle: {report['busy']}", file=sys.stderr)
        return 1
    return 0
