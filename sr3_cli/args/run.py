"""``sr3 run`` and ``sr3 state dump``: their options."""

from __future__ import annotations

import argparse
from typing import Any

from sr3_cli.args.common import add_cluster_args, conf_arg, handler, schedule_arg
from sr3_cli.argtypes import at_least, nonempty, positive_seconds
from sr3_cli.output import JSON_HELP

__all__ = ["add_parsers"]


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
    schedule_arg(
        p,
        "--kill-worker",
        "INDEX@SECONDS",
        "SIGKILL worker JVM INDEX (by slot port) (--engine apache-storm)",
    )
    schedule_arg(
        p,
        "--kill-supervisor",
        "INDEX@SECONDS",
        "SIGKILL the lab's supervisor INDEX, then restart it (--engine apache-storm)",
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
    schedule_arg(
        p,
        "--kill",
        "COMPONENT:INDEX@SECONDS",
        "SIGKILL task INDEX of COMPONENT at a moment (several allowed)",
    )
    schedule_arg(
        p,
        "--kill-node",
        "NODE@SECONDS",
        "SIGKILL a ring node of the lab at a moment (several allowed)",
    )
    conf_arg(p, "Storm conf override, as sparse -o (repeatable)")
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
    p.set_defaults(handler=handler("sr3_cli.topology_cmd:run"))

    state = sub.add_parser("state", help="committed state of topologies")
    state_sub = state.add_subparsers(dest="state_command", required=True)
    dump = state_sub.add_parser("dump", help="print a component's committed state")
    dump.add_argument("--topology", required=True, type=nonempty)
    dump.add_argument("--component", required=True, type=nonempty)
    add_cluster_args(dump)
    dump.add_argument("--json", action="store_true", help=JSON_HELP)
    dump.set_defaults(handler=handler("sr3_cli.state_cmd:state_dump"))
