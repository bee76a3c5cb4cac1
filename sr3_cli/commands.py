"""Handlers of the ``sr3`` subcommands: each takes parsed args, returns an exit code."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.cluster import wait_for_members
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.lab_netns_cmd import build_hosts
from sr3_cli.processes import lab_processes, stop_lab_processes
from sr3_cli.snapshot_cmd import run_get, run_put
from sr3_cli.status import run_status

__all__ = [
    "demo",
    "lab_down",
    "lab_kill",
    "lab_restart",
    "lab_up",
    "snapshot_get",
    "snapshot_put",
    "status",
    "wait_for_members",
]


_DEFAULT_LAB_NODES = 5


def _lab_root(args: argparse.Namespace) -> Path:
    return resolve_lab_dir(args.lab_dir) or Path("lab").resolve()


def lab_up(args: argparse.Namespace) -> int:
    """``sr3 lab up``: start (or complete) a lab and wait until it is ready."""
    root = _lab_root(args)
    if root.exists() and not root.is_dir():
        msg = f"lab dir {root} is a file; give `sr3 lab up --dir` a directory"
        raise ConfigError(msg)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = (
            f"cannot create a lab in {root}: {exc}; give `sr3 lab up --dir` a "
            "directory you can write"
        )
        raise ConfigError(msg) from exc
    # a corrupt lab.json is refused, never overwritten; a second `lab up` at
    # once waits for this one, then finds everything running
    with Lab.update(root, create=True) as lab:
        return _lab_up(args, lab)


def _lab_up(args: argparse.Namespace, lab: Lab) -> int:
    root = lab.root
    wanted = args.nodes or len(lab.nodes) or _DEFAULT_LAB_NODES
    if wanted < len(lab.nodes):
        print(
            f"note: the lab already has {len(lab.nodes)} ring nodes; "
            f"--nodes {wanted} removes none (`sr3 lab kill` stops some)"
        )
    started = time.perf_counter()
    if getattr(args, "zk", None):
        lab.use_zookeeper(args.zk, netns=bool(getattr(args, "netns", False)))
    hosts = build_hosts(args, lab, wanted)
    lab.start_zookeeper()
    missing = wanted - len(lab.nodes)
    zones = [z for z in args.zones.split(",") if z] or None
    if missing > 0:
        lab.add_nodes(missing, zones)
    lab.start_nodes(sorted(lab.nodes))
    wait_for_members(lab, len(lab.nodes))
    spark = ""
    if args.spark:
        url = lab.start_spark(cores=args.spark_cores, memory=args.spark_memory)
        spark = f", Spark master {url}"
    where = lab.zk_hosts
    if lab.zk_external:
        where += f" (external, chroot {lab.chroot})"
    print(
        f"lab up in {root}: ZooKeeper {where}, {len(lab.nodes)} ring nodes"
        f"{spark}{hosts} ({time.perf_counter() - started:.1f}s)\n"
        f"use it with: export SR3_LAB={root}"
    )
    return 0


def lab_down(args: argparse.Namespace) -> int:
    """``sr3 lab down``: stop Spark (if started), the nodes, then ZooKeeper."""
    root = _lab_root(args)
    try:
        lab = Lab.load(root)
    except ConfigError:
        # lab.json deleted or damaged: stop what the lab started all the same
        leftovers = lab_processes(root)
        lab_netns.teardown(root, None)  # hosts a crashed lab left, by name
        if not leftovers:
            raise
        stop_lab_processes(root, leftovers)
        if args.purge and root.is_dir():
            shutil.rmtree(root)
        pids = ", ".join(map(str, leftovers))
        print(
            f"no readable lab.json in {root}: stopped the ring nodes and ZooKeeper "
            f"still running from it (pids {pids})"
            + (" and deleted it" if args.purge else "")
        )
        return 0
    leftovers = lab.stop()
    if args.purge:
        shutil.rmtree(root)
    print(f"lab in {root} stopped" + (" and deleted" if args.purge else ""))
    if leftovers:
        pids = ", ".join(map(str, leftovers))
        print(f"also stopped processes lab.json did not list (pids {pids})")
    return 0


def lab_kill(args: argparse.Namespace) -> int:
    """``sr3 lab kill``: SIGKILL the named nodes."""
    lab = Lab.load(_lab_root(args))
    killed = lab.kill_nodes(list(args.node_ids))
    idle = [n for n in args.node_ids if n not in killed]
    if killed:
        print("killed " + ", ".join(killed))
    if idle:
        print("not running: " + ", ".join(idle))
    return 0


def lab_restart(args: argparse.Namespace) -> int:
    """``sr3 lab restart``: start the named nodes again on their data dirs."""
    # locked throughout: a second restart at once waits, then finds them running
    with Lab.update(_lab_root(args)) as lab:
        lab.check_nodes(list(args.node_ids))
        running = [n for n in args.node_ids if lab.nodes[n].alive]
        lab.start_zookeeper()
        lab.start_nodes(list(args.node_ids))
    started = [n for n in args.node_ids if n not in running]
    if started:
        print("restarted " + ", ".join(started))
    if running:
        print("already running: " + ", ".join(running))
    return 0


def status(args: argparse.Namespace) -> int:
    """``sr3 status``."""
    return run_status(args)


def snapshot_put(args: argparse.Namespace) -> int:
    """``sr3 snapshot put``."""
    return run_put(args)


def snapshot_get(args: argparse.Namespace) -> int:
    """``sr3 snapshot get``."""
    return run_get(args)


def demo(args: argparse.Namespace) -> int:
    """``sr3 demo``: the main job on embedded defaults."""
    from sr3_cli.demo import run_demo  # noqa: PLC0415

    tmp = Path(os.environ.get("TMPDIR", "/tmp"))  # noqa: S108 - a scratch lab
    # only --dir, never $SR3_LAB: the demo wipes its dir, not the user's lab
    root = Path(args.lab_dir).resolve() if args.lab_dir else tmp / "sr3-demo"
    return run_demo(root, size=args.size, default=not args.lab_dir)
