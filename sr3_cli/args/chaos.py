"""``sr3 chaos``: its options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, get_args

from sr3_cli.args.common import conf_arg, handler
from sr3_cli.argtypes import at_least, positive_seconds
from sr3_cli.chaos import APACHE_STORM, SPARK_STANDALONE, FaultKind
from sr3_cli.chaos_compare import AUTO, COMPARE_MODES
from sr3_cli.output import JSON_HELP

__all__ = ["DEFAULT_TOPOLOGY", "add_parsers"]

#: ``sr3 chaos --topology``'s default: the word count, with a small corpus.
DEFAULT_TOPOLOGY = Path("topologies") / "wordcount.py"


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 chaos`` to the ``sr3`` parser."""
    p = sub.add_parser(
        "chaos",
        help="randomized failure campaign: seeded schedules checked against a "
        "failure-free run",
    )
    p.add_argument(
        "--topology",
        default=str(DEFAULT_TOPOLOGY),
        help=f"topology file ({DEFAULT_TOPOLOGY}, with a small corpus)",
    )
    p.add_argument("--schedules", type=at_least(1), default=10, help="how many (10)")
    p.add_argument("--seed", type=int, default=1, help="campaign seed (1)")
    p.add_argument(
        "--only",
        type=at_least(0),
        default=None,
        metavar="INDEX",
        help="run only schedule INDEX of the seed (replays a failure)",
    )
    p.add_argument(
        "--engine",
        choices=["storm", "spark", "both", APACHE_STORM, SPARK_STANDALONE],
        default="storm",
        help="engines drawn: the Storm engine's local cluster in the --mode "
        "checkpoint modes, Spark (local[2]; no task kills), or both; or a real "
        "Apache Storm cluster alone (the lab's, `sr3 lab up --storm`, or "
        "--nimbus; native checkpoints; also worker and coordinator kills); or a "
        "Spark standalone cluster (the lab's, `sr3 lab up --spark`, or --master; "
        "executor and driver kills) (storm)",
    )
    p.add_argument(
        "--master",
        default=None,
        metavar="spark://HOST:PORT",
        help="--engine spark-standalone: this master, not the lab's (its workers "
        "run on this machine)",
    )
    p.add_argument(
        "--nimbus",
        default=None,
        metavar="HOST:PORT",
        help="--engine apache-storm: this Nimbus, not the lab's (its workers run "
        "on this machine)",
    )
    p.add_argument(
        "--kinds",
        type=_kinds,
        default=None,
        metavar="KIND,...",
        help="draw only these fault kinds (all of the engine's): "
        + ", ".join(get_args(FaultKind)),
    )
    p.add_argument(
        "--mode",
        choices=["local", "native", "both"],
        default="both",
        help="checkpoint modes drawn (both)",
    )
    conf_arg(p, "Storm conf of every run (repeatable)")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=120.0,
        help="bound of each run (120 s)",
    )
    p.add_argument("--lab", default=None, help="a running lab (default: a new one)")
    p.add_argument(
        "--netns-faults",
        action="store_true",
        help="also draw partition-node (a ring node's host cut off) and netem-slow "
        "(every link slowed) faults; needs --lab of a `sr3 lab up --netns` lab",
    )
    p.add_argument(
        "--compare",
        choices=COMPARE_MODES,
        default=AUTO,
        help="how each schedule's end is held to the failure-free run's: exactly; "
        "with lists as multisets (a state that keeps tuples in arrival order); or "
        "auto: the failure-free run twice, exact if both end alike, unordered if "
        "they differ only in list order, refused otherwise (auto)",
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(handler=handler("sr3_cli.chaos_cmd:chaos"))


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in get_args(FaultKind)]
    if unknown or not kinds:
        msg = (
            f"unknown fault kind {', '.join(unknown) or repr(text)}; "
            f"choose among {', '.join(get_args(FaultKind))}"
        )
        raise argparse.ArgumentTypeError(msg)
    return kinds
