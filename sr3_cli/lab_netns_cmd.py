"""``sr3 lab up --netns``'s options and ``sr3 lab fail|partition|heal``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.argtypes import int_between
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.netns import LinkShape

__all__ = ["add_parsers", "add_up_args", "build_hosts"]

#: Most hosts ``--netns`` builds (each a namespace and a veth pair).
MAX_HOSTS = 32
NETEM_HELP = (
    "with --netns: shape every host's link, each direction: comma-separated "
    "rate=RATE (tc units: 100mbit), delay=MS (20ms), loss=PERCENT (0.1%%); "
    "rate alone uses tbf, delay and loss need the kernel's netem (default: unshaped)"
)


def add_up_args(up: argparse.ArgumentParser) -> None:
    """Add ``--netns``, ``--hosts`` and ``--netem`` to ``sr3 lab up``."""
    up.add_argument(
        "--netns",
        action="store_true",
        help="run ZooKeeper and the ring nodes on separate hosts: network "
        "namespaces on one bridge, each with its own address (needs root)",
    )
    up.add_argument(
        "--hosts",
        type=int_between(1, MAX_HOSTS),
        default=None,
        help=f"with --netns: hosts, 1..{MAX_HOSTS} (default: one for ZooKeeper "
        "plus one per ring node)",
    )
    up.add_argument("--netem", default="", help=NETEM_HELP)


def build_hosts(args: argparse.Namespace, lab: Lab, nodes: int) -> str:
    """Build (or keep) the lab's hosts as ``lab up`` asks; return a summary."""
    if not getattr(args, "netns", False) and lab.netns is None:
        if getattr(args, "hosts", None) or getattr(args, "netem", ""):
            msg = "--hosts and --netem shape a netns lab: add --netns"
            raise ConfigError(msg)
        return ""
    running = lab.zookeeper_running or any(n.alive for n in lab.nodes.values())
    if lab.netns is None and running:
        msg = (
            f"the lab in {lab.root} runs on loopback; `sr3 lab down --dir "
            f"{lab.root}` first, then `sr3 lab up --netns` moves it onto hosts "
            "(node data is kept)"
        )
        raise ConfigError(msg)
    if getattr(args, "netns", False):
        hosts = args.hosts or nodes + 1
        shape = LinkShape.parse(args.netem)
    else:  # a netns lab brought up again: as it was built
        record = lab.netns or {}
        hosts = len(record["hosts"])
        shape = LinkShape.parse(lab_netns.shape_text(record))
    with lab.locked():
        lab_netns.build(lab, hosts=hosts, shape=shape)
    return f", {hosts} hosts ({shape})"


def _lab(args: argparse.Namespace) -> Lab:
    return Lab.load(resolve_lab_dir(args.lab_dir) or Path("lab").resolve())


def lab_fail(args: argparse.Namespace) -> int:
    """``sr3 lab fail HOST...``: SIGKILL everything on the hosts."""
    lab = _lab(args)
    for host in args.hosts:
        pids = lab_netns.fail(lab, host)
        print(f"{host}: killed {len(pids)} processes" + (f" ({pids})" if pids else ""))
    return 0


def lab_partition(args: argparse.Namespace) -> int:
    """``sr3 lab partition HOST [--from HOST...]``."""
    lab = _lab(args)
    peers = lab_netns.partition(lab, args.host, args.peers or None)
    print(f"{args.host} cut off from " + ", ".join(peers) + " (`sr3 lab heal` ends it)")
    return 0


def lab_heal(args: argparse.Namespace) -> int:
    """``sr3 lab heal``: end every partition."""
    lab_netns.heal(_lab(args))
    print("every partition healed")
    return 0


def add_parsers(lab: Any, lab_dir_arg: Any) -> None:
    """Add ``fail``, ``partition`` and ``heal`` to the ``sr3 lab`` subparsers."""
    fail = lab.add_parser("fail", help="netns lab: SIGKILL everything on hosts")
    lab_dir_arg(fail)
    fail.add_argument("hosts", nargs="+", metavar="HOST", help="as h2 (sr3 status)")
    fail.set_defaults(handler=lab_fail)
    part = lab.add_parser(
        "partition", help="netns lab: drop traffic between a host and others"
    )
    lab_dir_arg(part)
    part.add_argument("host", metavar="HOST")
    part.add_argument(
        "--from",
        dest="peers",
        nargs="+",
        metavar="HOST",
        default=None,
        help="the hosts to cut it off from (default: every other host and "
        "'root', the namespace the sr3 CLI runs in)",
    )
    part.set_defaults(handler=lab_partition)
    heal = lab.add_parser("heal", help="netns lab: end every partition")
    lab_dir_arg(heal)
    heal.set_defaults(handler=lab_heal)
