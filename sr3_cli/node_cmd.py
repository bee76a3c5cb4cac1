"""``sr3 node``: one ring node in the foreground.

A lab starts one such process per ring node, so this module imports only what
serving needs (:mod:`zk.node` and the node's config), none of the other
commands' modules.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import replace
from pathlib import Path

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.secret_file import read_secret
from zk.node import NodeOptions, run_node

__all__ = ["node"]


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a host name
        return False


def node(args: argparse.Namespace) -> int:
    """``sr3 node``: run one ring node in the foreground."""
    if _unspecified(args.host):
        msg = (
            f"--host {args.host} binds every interface but is no address other "
            "nodes and clients can reach; give this machine's address on the "
            "ring's network (--host is bound and announced)"
        )
        raise ConfigError(msg)
    base = Sr3Config.from_env()
    secret = read_secret(args.secret_file) or base.node.secret
    data_dir: Path = args.data_dir.resolve()
    if data_dir.exists() and not data_dir.is_dir():
        msg = f"--data-dir {data_dir} is a file; give the node a directory"
        raise ConfigError(msg)
    config = replace(
        base,
        zk=replace(base.zk, hosts=args.zk, chroot=args.chroot or base.zk.chroot),
        node=replace(base.node, secret=secret),
    )
    options = NodeOptions(
        data_dir=data_dir,
        host=args.host,
        port=args.port,
        zone=args.zone,
        node_id=args.node_id,
        capacity=args.capacity,
    )
    try:
        run_node(config, options)
    except OSError as exc:
        msg = (
            f"ring node on {args.host}:{args.port} with data dir {data_dir} failed: "
            f"{exc}; if the address is taken or not local, pick another --port "
            "(0 = any free port) or --host"
        )
        raise ConfigError(msg) from exc
    return 0
