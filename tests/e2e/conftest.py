"""Fixtures for whole-ring tests: a lab of real node processes under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab

JAR = Path("/usr/share/java/zookeeper.jar")


def require_zk() -> None:
    """Skip without Debian's ZooKeeper, or fail when CI requires it."""
    if not JAR.exists():
        reason = "Debian's zookeeper package is not installed (make setup installs it)"
        if os.environ.get("SR3_REQUIRE_ZK") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def lab_factory(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Start labs of N nodes; stop every one at teardown."""
    require_zk()
    labs: list[Lab] = []

    def make(nodes: int = 5, name: str = "lab") -> Lab:
        lab = Lab(root=tmp_path / name)
        lab.root.mkdir(parents=True)
        lab.save()
        labs.append(lab)
        lab.start_zookeeper()
        lab.add_nodes(nodes)
        lab.start_nodes(sorted(lab.nodes))
        wait_for_members(lab, nodes)
        return lab

    yield make
    for lab in labs:
        # reload: `sr3 lab restart` run as a subprocess records new pids on disk
        current = Lab.load(lab.root)
        current.stop_nodes()
        current.stop_zookeeper()


def sr3(lab: Lab, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the ``sr3`` command against ``lab`` as a user would."""
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"sr3 {' '.join(args)} exited {proc.returncode}:\n"
            f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
        )
    return proc


def sr3_json(lab: Lab, *args: str) -> Any:
    """Run ``sr3 ... --json`` and parse its output."""
    return json.loads(sr3(lab, *args, "--json").stdout)
