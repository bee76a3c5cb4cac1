"""``sr3 savepoint create|list|delete``: their options.

``sr3 savepoint TOPOLOGY [--name NAME]`` (no sub-command) is ``create``:
:func:`shorthand` rewrites the words before they are parsed.
"""

from __future__ import annotations

import argparse
from typing import Any

from sr3_cli.args.common import add_cluster_args, handler
from sr3_cli.argtypes import nonempty
from sr3_cli.output import JSON_HELP

__all__ = ["add_parsers", "shorthand"]

#: The sub-commands of ``sr3 savepoint``; any other word after it is a topology.
SUBCOMMANDS = ("create", "list", "delete")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 savepoint`` and its subcommands to the ``sr3`` parser."""
    savepoint = sub.add_parser(
        "savepoint",
        help="named commit records of a topology, kept from garbage collection",
        description="A savepoint records a topology's committed epoch (offsets, "
        "owners) under a name and keeps its state's manifests and shards from "
        "garbage collection until deleted. `sr3 run FILE --from-savepoint NAME` "
        "(--engine storm or spark) starts from it, at any parallelism. "
        "`sr3 savepoint TOPOLOGY [--name NAME]` is short for `create`.",
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


def shorthand(words: list[str]) -> list[str]:
    """Return ``words`` with ``create`` after a ``savepoint`` that names no sub-command.

    ``sr3 savepoint wc --name v1`` takes a savepoint, as ``sr3 savepoint
    create wc --name v1`` does. Only the command's first word counts (a
    ``--log-level`` value before it is skipped).
    """
    for i, word in enumerate(words):
        if word.startswith("-") or (i > 0 and words[i - 1] == "--log-level"):
            continue
        if word != "savepoint" or i + 1 >= len(words):
            return words
        following = words[i + 1]
        if following.startswith("-") or following in SUBCOMMANDS:
            return words
        return [*words[: i + 1], "create", *words[i + 1 :]]
    return words
