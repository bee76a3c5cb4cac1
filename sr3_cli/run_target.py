"""Where ``sr3 run`` runs: the lab or ZooKeeper it is given, or a throw-away lab."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sr3.config import Sr3Config
from sr3_cli.cluster import checked_config, wait_for_members
from sr3_cli.lab import Lab

__all__ = ["EMBEDDED_NODES", "RunTarget", "embedded_lab", "run_target"]

EMBEDDED_NODES = 3


@dataclass
class RunTarget:
    """The configuration a run reaches the ring with, and its lab if it has one."""

    config: Sr3Config
    lab: Lab | None


@contextmanager
def embedded_lab(nodes: int = EMBEDDED_NODES) -> Iterator[Lab]:
    """Run a throw-away lab (ZooKeeper and ``nodes`` ring nodes) in a temp dir."""
    root = Path(tempfile.mkdtemp(prefix="sr3-run-"))
    lab = Lab(root=root)
    lab.save()
    try:
        lab.start_zookeeper()
        lab.add_nodes(nodes)
        lab.start_nodes(sorted(lab.nodes), log_level="WARNING")
        wait_for_members(lab, nodes)
        yield lab
    finally:
        Lab.load(root).stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def run_target(args: argparse.Namespace) -> Iterator[RunTarget]:
    """Yield what ``--zk``, ``--lab`` or ``SR3_LAB`` name, else an embedded lab."""
    if args.zk or args.lab or os.environ.get("SR3_LAB"):
        config = checked_config(args)
        lab_dir = args.lab or os.environ.get("SR3_LAB")
        lab = Lab.load(Path(lab_dir).resolve()) if lab_dir and not args.zk else None
        yield RunTarget(config, lab)
        return
    with embedded_lab() as lab:
        yield RunTarget(lab.config(Sr3Config.from_env()), lab)
