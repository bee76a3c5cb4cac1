"""The ring's sub-commands and their options: node, status, snapshot and demo."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sr3.ring import MAX_CAPACITY
from sr3_cli.args.common import add_cluster_args, handler
from sr3_cli.argtypes import at_least, fraction, int_between, nonempty, tcp_port
from sr3_cli.output import JSON_HELP

__all__ = ["add_demo_parser", "add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 node``, ``sr3 status`` and ``sr3 snapshot`` to the parser."""
    node = sub.add_parser("node", help="run one ring node in the foreground")
    node.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT[,HOST:PORT]")
    node.add_argument(
        "--chroot", default=None, help="cluster root znode (/sr3/default)"
    )
    node.add_argument(
        "--host", default="127.0.0.1", help="address to bind and announce"
    )
    node.add_argument(
        "--port", type=tcp_port, default=0, help="TCP port (0 = any free port)"
    )
    node.add_argument("--data-dir", required=True, type=Path)
    node.add_argument("--zone", default=None, help="failure zone label")
    node.add_argument(
        "--node-id",
        type=nonempty,
        default=None,
        help="id on first start (kept in data dir)",
    )
    node.add_argument(
        "--capacity",
        # each unit is sr3.ring.vnodes (2048) ring points that every client and
        # node hashes and sorts on each membership change
        type=int_between(1, MAX_CAPACITY),
        default=1,
        help=f"relative ring weight, 1..{MAX_CAPACITY} (default 1)",
    )
    node.add_argument("--secret-file", default=None, help="shared ring secret")
    node.set_defaults(handler=handler("sr3_cli.node_cmd:node"))

    status = sub.add_parser(
        "status", help="members, shards per node, replication health"
    )
    add_cluster_args(status)
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(handler=handler("sr3_cli.commands:status"))

    snap = sub.add_parser("snapshot", help="synthetic keyed snapshots").add_subparsers(
        dest="snapshot_command", required=True
    )
    put = snap.add_parser("put", help="write a synthetic snapshot through the ring")
    add_cluster_args(put)
    put.add_argument("--owner", required=True, type=nonempty)
    put.add_argument("--size", required=True, help="total bytes, as 200MB or 1GiB")
    put.add_argument(
        "--keys", type=at_least(1), default=None, help="key count (default size/1KiB)"
    )
    put.add_argument(
        "--seed",
        # stored in the manifest, whose msgpack ints are 64-bit
        type=int_between(-(2**63), 2**64 - 1),
        default=0,
        help="seed of the values (default 0)",
    )
    put.add_argument(
        "--epochs", type=at_least(1), default=1, help="1 full epoch + deltas"
    )
    put.add_argument("--update-fraction", type=fraction, default=0.1)
    put.add_argument(
        "--max-chain-length",
        type=at_least(1),
        default=None,
        help="deltas before a full epoch (default sr3.checkpoint.max.chain.length)",
    )
    put.add_argument("--json", action="store_true", help=JSON_HELP)
    put.set_defaults(handler=handler("sr3_cli.commands:snapshot_put"))
    get = snap.add_parser(
        "get", help="recover a snapshot from the ring by star, line or tree"
    )
    add_cluster_args(get)
    get.add_argument("--owner", required=True, type=nonempty)
    get.add_argument(
        "--epoch", type=at_least(1), default=None, help="default: latest committed"
    )
    get.add_argument(
        "--mechanism",
        choices=("star", "line", "tree", "auto"),
        default="auto",
        help="recovery structure (default auto: the planner chooses)",
    )
    get.add_argument(
        "--eager",
        action="store_true",
        help="decode every key group at install (default: lazy, on first touch)",
    )
    get.add_argument(
        "--verify", action="store_true", help="check every key; exit 1 on mismatch"
    )
    get.add_argument("--json", action="store_true", help=JSON_HELP)
    get.set_defaults(handler=handler("sr3_cli.commands:snapshot_get"))


def add_demo_parser(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 demo`` to the ``sr3`` parser."""
    demo = sub.add_parser("demo", help="the main job on embedded defaults")
    demo.add_argument(
        "--dir",
        dest="lab_dir",
        default=None,
        help="scratch lab dir, wiped first: new, empty or an earlier demo's "
        "(default $TMPDIR/sr3-demo; $SR3_LAB is never used)",
    )
    demo.add_argument("--size", default="200MB", help="snapshot size (default 200MB)")
    demo.set_defaults(handler=handler("sr3_cli.commands:demo"))
