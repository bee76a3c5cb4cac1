"""``sr3 savepoint create|list|delete``: their options."""

from __future__ import annotations

import argparse
from typing import Any

from sr3_cli.args.common import add_cluster_args, handler
from sr3_cli.argtypes import nonempty
from sr3_cli.output import JSON_HELP

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 savepoint`` and its subcommands to the ``sr3`` parser."""
    savepoint = sub.add_parser(
        "savepoint",
        help="named commit records of a topology, kept from garbage collection",
        description="A savepoint records a topology's committed epoch (offsets, "
        "owners) under a name and keeps its state's manifests and shards from "
        "garbage collection until deleted. `sr3 run FILE --from-savepoint NAME` "
        "(--engine storm or spark) starts from it, at any parallelism.",
    )
    commands = savepoint.add_subparsers(dest="savepoint_command", required=True)
    make = commands.add_parser("create", help="pin the committed epoch under a name")
    make.add_argument("topology", type=nonempty, help="topology (the file's stem)")
    make.add_argument(
        "--name", type=nonempty, default=None, help="savepoint name (sp-<epoch>)"
    )
    listing = commands.add_parser("list", help="the topology's savepoints")
    listing.add_argument("topology", type=nonempty, help="topology (the file's stem)")
    drop = commands.add_parser(
        "delete", help="unpin a savepoint; later collections free its state"
    )
    drop.add_argument("topology", type=nonempty, help="topology (the file's stem)")
    drop.add_argument("name", type=nonempty, help="savepoint name")
    for parser, name in (
        (make, "create"),
        (listing, "list_savepoints"),
        (drop, "delete"),
    ):
        add_cluster_args(parser)
        parser.add_argument("--json", action="store_true", help=JSON_HELP)
        parser.set_defaults(handler=handler(f"sr3_cli.savepoint_cmd:{name}"))
