"""``sr3 lab down`` stops every process the lab started, whatever lab.json says.

lab.json may be a stale copy (pids of processes long gone, none of those
started since) or gone; the processes are found in ``/proc`` by the lab dir in
their arguments or working dir. Each case runs ``sr3`` in subprocesses against
a real lab and checks ``/proc`` afterwards.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3_cli.lab import Lab
from sr3_cli.processes import alive, lab_processes, terminate
from tests.conftest import run_sr3 as sr3
from tests.integration.conftest import WaitUntil, running_lab

# each case stops, kills or moves the lab's ZooKeeper: the lab runs its own
pytestmark = [pytest.mark.zk, pytest.mark.slow, pytest.mark.own_zookeeper]


def lab_pids(root: Path) -> list[int]:
    """Pids lab.json lists now (ZooKeeper, nodes, Spark master and worker)."""
    lab = Lab.load(root)
    spark = lab.spark or {}
    pids = [lab.zk_pid, spark.get("master_pid"), spark.get("worker_pid")]
    pids += [node.pid for node in lab.nodes.values()]
    return [pid for pid in pids if pid is not None]


@pytest.fixture
def lab_dir(lab: Lab) -> Iterator[Path]:
    """The lab's dir; whatever of it a failed test left running is stopped after."""
    yield lab.root
    for pid in lab_processes(lab.root):
        terminate(pid)


def test_lab_down_with_a_stale_lab_json_stops_the_processes_started_since(
    lab_dir: Path, wait_until: WaitUntil
) -> None:
    root = str(lab_dir)
    stale = (lab_dir / "lab.json").read_text(encoding="utf-8")
    assert sr3("lab", "kill", "node-2", "--dir", root).returncode == 0
    zk_pid = Lab.load(lab_dir).zk_pid
    assert zk_pid is not None
    os.kill(zk_pid, signal.SIGKILL)
    wait_until(lambda: not alive(zk_pid), what="ZooKeeper to die")
    restart = sr3("lab", "restart", "node-2", "--dir", root)
    assert restart.returncode == 0, restart.stderr
    running = lab_pids(lab_dir)
    assert len(running) == 4 and all(alive(pid) for pid in running)
    (lab_dir / "lab.json").write_text(stale, encoding="utf-8")  # by hand, say

    down = sr3("lab", "down", "--dir", root)
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith(f"lab in {root} stopped\n")
    survivors = [pid for pid in running if alive(pid)]
    assert survivors == [], down.stdout
    assert lab_processes(lab_dir) == []


@pytest.mark.spark
def test_lab_down_without_lab_json_stops_its_spark_daemons_too(
    tmp_path: Path, zk_server: object
) -> None:
    from spark_bridge.spark_install import (  # noqa: PLC0415 (pyspark only here)
        SparkMissingError,
    )
    from spark_bridge.standalone import StandaloneCluster  # noqa: PLC0415

    root = tmp_path / "lab"
    with running_lab(root, nodes=1) as lab:
        try:
            lab.start_spark(cores=1, memory="512m")  # what `sr3 lab up --spark` runs
        except SparkMissingError as exc:
            pytest.fail(f"Spark cannot run here ({exc}); `make setup` installs it")
        try:
            running = lab_pids(root)
            assert len(running) == 4 and all(alive(pid) for pid in running)
            (root / "lab.json").unlink()

            down = sr3("lab", "down", "--dir", str(root))
            assert down.returncode == 0, down.stderr
            assert f"no readable lab.json in {root}: stopped" in down.stdout
            survivors = [pid for pid in running if alive(pid)]
            assert survivors == [], down.stdout
            assert lab_processes(root) == []
        finally:
            StandaloneCluster.attach(root / "spark").stop()
            for pid in lab_processes(root):
                terminate(pid)
