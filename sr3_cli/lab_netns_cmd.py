"""``sr3 lab up --netns``'s hosts and ``sr3 lab fail|partition|heal``."""

from __future__ import annotations

import argparse
from pathlib import Path

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.netns import LinkShape

__all__ = ["build_hosts", "lab_fail", "lab_heal", "lab_partition"]


def build_hosts(args: argparse.Namespace, lab: Lab, nodes: int) -> str:
    """Build (or keep) the lab's hosts as ``lab up`` asks; return a summary."""
    if not getattr(args, "netns", False) and lab.netns is None:
        if getattr(args, "hosts", None) or getattr(args, "netem", ""):
            msg = "--hosts and --netem shape a netns lab: add --netns"
            raise ConfigError(msg)
        return ""
    if lab.zk_external:
        msg = (
            f"the lab in {lab.root} uses the external ZooKeeper at "
            f"{lab.zk_external}; a netns lab runs its own on one of its hosts: "
            "give `sr3 lab up --netns` a new --dir"
        )
        raise ConfigError(msg)
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
