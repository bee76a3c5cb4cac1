"""``sr3 rebalance``: its options."""

from __future__ import annotations

import argparse
from typing import Any, Final

from sr3_cli.args.common import add_cluster_args, handler
from sr3_cli.argtypes import nonempty
from sr3_cli.output import JSON_HELP

__all__ = ["add_parsers"]

_DEFAULT_WAIT_S: Final = 120.0


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 rebalance`` to the ``sr3`` parser."""
    parser = sub.add_parser(
        "rebalance",
        help="change a running topology's stateful task counts live",
        description="Change the task count of stateful components of a topology "
        "running under `sr3 run` (in another shell), while it runs, exactly once. "
        "A component may have 1 up to its key-group count (sr3.state.key.groups) "
        "tasks. Only the component's keys pause, for one epoch's hand-over. On "
        "real Storm (--nimbus, or the lab's Storm cluster), -e sets executors "
        "within the component's topology.tasks and -n workers, as `storm "
        "rebalance` does.",
    )
    parser.add_argument("topology", type=nonempty, help="topology (the file's stem)")
    parser.add_argument(
        "-e",
        "--executor",
        dest="executors",
        action="append",
        default=[],
        metavar="COMPONENT=N",
        help="new task count of a stateful component (repeatable)",
    )
    parser.add_argument(
        "-w",
        "--wait",
        type=float,
        default=_DEFAULT_WAIT_S,
        metavar="SECS",
        help=f"wait up to SECS for the rebalance to finish (default "
        f"{_DEFAULT_WAIT_S:g}; 0: return once requested)",
    )
    parser.add_argument(
        "-n",
        "--num-workers",
        dest="workers",
        type=int,
        default=None,
        help="Storm's worker count (a topology on Storm only)",
    )
    parser.add_argument(
        "--nimbus",
        default=None,
        metavar="HOST:PORT",
        help="rebalance a topology running on this Storm cluster, as `storm "
        "rebalance` does (default: the lab's Storm cluster when it runs the "
        "topology, else the local cluster's `sr3 run`)",
    )
    add_cluster_args(parser)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(handler=handler("sr3_cli.rebalance_cmd:rebalance"))
