"""``sr3 compare``: its options."""

from __future__ import annotations

import argparse
from typing import Any

from sr3_cli.args.common import conf_arg, handler, schedule_arg
from sr3_cli.argtypes import at_least, positive_seconds

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 compare`` to the ``sr3`` parser."""
    p = sub.add_parser(
        "compare",
        help="run a topology on several engines under the same failures; report",
    )
    p.add_argument("file", help="topology file (its stem is the topology name)")
    p.add_argument(
        "--engines",
        default="storm,spark",
        help="comma-separated, run in this order, the first is the reference: "
        "storm, spark, apache-storm (needs `sr3 lab up --storm`) (storm,spark)",
    )
    schedule_arg(
        p,
        "--kill",
        "COMPONENT:INDEX@SECONDS",
        "SIGKILL task INDEX of COMPONENT (Storm engines; Spark retries its own tasks)",
    )
    schedule_arg(
        p,
        "--kill-node",
        "NODE@SECONDS",
        "SIGKILL a ring node at a moment of each engine's run",
    )
    p.add_argument(
        "--netem",
        default=None,
        metavar="SPEC",
        help="shape every host's link of the --lab netns lab (`sr3 lab up "
        "--netns`) for the comparison, as rate=100mbit,delay=10ms,loss=0%%; the "
        "lab's own shape comes back after; see docs/lab.md",
    )
    p.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="longest run per engine, s (default: until idle, at most 600 s)",
    )
    conf_arg(p, "Storm conf override for every engine (repeatable)")
    p.add_argument(
        "--max-rows-per-batch",
        type=at_least(1),
        default=250,
        help="spout tuples per Spark micro-batch (250)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="report dir (default compare-<topology>-<UTC time>)",
    )
    p.add_argument(
        "--lab",
        default=None,
        metavar="DIR",
        help="run in this lab (default: $SR3_LAB, else an embedded one)",
    )
    p.set_defaults(handler=handler("sr3_cli.compare:compare"))
