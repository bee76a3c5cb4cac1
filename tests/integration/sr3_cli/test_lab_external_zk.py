"""``sr3 lab up --zk``: labs on a ZooKeeper they neither start nor stop.

Each case runs the installed command in subprocesses against the session's real
ZooKeeper, as a user with a ZooKeeper ensemble of their own would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sr3_cli.lab import Lab
from sr3_cli.processes import lab_processes, terminate
from tests.conftest import run_sr3 as sr3
from zk.launcher import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.slow]


def test_two_labs_share_one_zookeeper_and_down_leaves_it_running(
    tmp_path: Path, zk_server: EmbeddedZooKeeper
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    try:
        for root, nodes in zip(dirs, (2, 3), strict=True):
            up = sr3("lab", "up", "--dir", str(root), "--nodes", str(nodes),
                     "--zk", zk_server.hosts)  # fmt: skip
            assert up.returncode == 0, up.stderr
            assert f"ZooKeeper {zk_server.hosts} (external, chroot /sr3/lab-" in (
                up.stdout
            )
        a, b = (Lab.load(root) for root in dirs)
        assert a.zk_external == b.zk_external == zk_server.hosts
        assert a.chroot != b.chroot
        assert a.zk_pid is None and not (dirs[0] / "zk").exists()  # none started
        # each lab's ring sees its own nodes only
        for root, nodes in zip(dirs, (2, 3), strict=True):
            status = sr3("status", "--lab", str(root), "--json")
            assert status.returncode == 0, status.stderr
            assert len(json.loads(status.stdout)["nodes"]) == nodes
        put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB",
                  "--lab", str(dirs[0]))  # fmt: skip
        assert put.returncode == 0, put.stderr
        # lab up again (nothing new), down, up: the same ZooKeeper and chroot
        down = sr3("lab", "down", "--dir", str(dirs[0]))
        assert down.returncode == 0, down.stderr
        assert zk_server.is_running()
        status = sr3("status", "--lab", str(dirs[1]), "--json")
        assert len(json.loads(status.stdout)["nodes"]) == 3  # b unaffected
        again = sr3("lab", "up", "--dir", str(dirs[0]))
        assert again.returncode == 0, again.stderr
        assert Lab.load(dirs[0]).chroot == a.chroot
        get = sr3("snapshot", "get", "--owner", "o", "--lab", str(dirs[0]))
        assert get.returncode == 0, get.stderr  # what was stored is still there
    finally:
        for root in dirs:
            if (root / "lab.json").exists():
                sr3("lab", "down", "--dir", str(root))
            for pid in lab_processes(root):
                terminate(pid)
    assert zk_server.is_running()


def test_zk_is_refused_where_the_lab_has_its_own_or_runs_on_hosts(
    tmp_path: Path, zk_server: EmbeddedZooKeeper
) -> None:
    root = tmp_path / "own"
    try:
        assert sr3("lab", "up", "--dir", str(root), "--nodes", "1").returncode == 0
        moved = sr3("lab", "up", "--dir", str(root), "--zk", zk_server.hosts)
        assert moved.returncode != 0
        assert "already uses a ZooKeeper of its own" in moved.stderr
        assert "applies only to a new lab" in moved.stderr
        assert Lab.load(root).zk_external is None  # nothing changed
    finally:
        sr3("lab", "down", "--dir", str(root))
    netns = sr3("lab", "up", "--dir", str(tmp_path / "hosts"), "--netns",
                "--zk", zk_server.hosts)  # fmt: skip
    assert netns.returncode != 0
    assert "cannot be combined with --netns" in netns.stderr
    bad = sr3("lab", "up", "--dir", str(tmp_path / "bad"), "--zk", "zk1:99999")
    assert bad.returncode != 0
    assert "zk1:99999" in bad.stderr
    assert lab_processes(tmp_path / "bad") == []
