"""Commands that change a lab at the same time never undo each other's changes.

``sr3 run --kill-node`` kills ring nodes of a lab while the user may restart its
ZooKeeper or nodes with ``sr3 lab restart``; two restarts may run at once. Each
case runs ``sr3`` in subprocesses against a real lab (its own ZooKeeper and ring
node processes) and checks lab.json, the commands' output and which processes
run afterwards (from ``/proc``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3_cli.lab import Lab
from sr3_cli.processes import alive, command_line, lab_processes, terminate
from tests.integration.conftest import WaitUntil

# each case stops, kills or moves the lab's ZooKeeper: the lab runs its own
pytestmark = [pytest.mark.zk, pytest.mark.slow, pytest.mark.own_zookeeper]

ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
ROUNDS = 5


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}


def sr3(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS``; check it printed no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=240,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def sigkill(pid: int | None, wait_until: WaitUntil) -> None:
    """SIGKILL ``pid`` and wait until it is gone."""
    assert pid is not None and alive(pid)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), what=f"pid {pid} to die")


def zookeepers(root: Path) -> list[int]:
    """The lab's ZooKeeper processes, found in ``/proc``."""
    return [pid for pid in lab_processes(root) if ZK_MAIN in (command_line(pid) or [])]


@pytest.fixture
def lab_dir(lab: Lab) -> Iterator[Path]:
    """The lab's dir; whatever of it a failed test left running is stopped after."""
    yield lab.root
    for pid in lab_processes(lab.root):
        terminate(pid)


def test_a_node_kill_by_a_run_keeps_a_zookeeper_restart_made_meanwhile(
    lab_dir: Path, wait_until: WaitUntil
) -> None:
    root = str(lab_dir)
    # `sr3 run --lab DIR --kill-node node-2@S` loads the lab as it starts and
    # kills through that object (topology_cmd._node_killer) S seconds later
    run_view = Lab.load(lab_dir)
    sigkill(run_view.zk_pid, wait_until)
    restart = sr3("lab", "restart", "node-2", "--dir", root)  # ZooKeeper comes back
    assert restart.returncode == 0, restart.stderr
    assert restart.stdout.strip() == "already running: node-2"
    zk_pid = Lab.load(lab_dir).zk_pid
    assert zk_pid != run_view.zk_pid
    assert alive(zk_pid)

    node_2 = Lab.load(lab_dir).nodes["node-2"].pid
    assert run_view.kill_nodes(["node-2"]) == ["node-2"]  # the run's kill at S
    wait_until(lambda: not alive(node_2), what="node-2 to die")
    assert Lab.load(lab_dir).zk_pid == zk_pid  # the restart is not undone

    restart = sr3("lab", "restart", "node-2", "--dir", root)
    assert restart.returncode == 0, restart.stderr
    assert restart.stdout.strip() == "restarted node-2"
    # a later kill of the same run reaches the node restarted since
    new_node_2 = Lab.load(lab_dir).nodes["node-2"].pid
    assert new_node_2 != node_2
    assert run_view.kill_nodes(["node-2"]) == ["node-2"]
    wait_until(lambda: not alive(new_node_2), what="the restarted node-2 to die")

    status = sr3("status", "--lab", root)
    assert status.returncode == 0, status.stderr
    dump = sr3("state", "dump", "--topology", "t", "--component", "c", "--lab", root)
    assert "is stopped" not in dump.stderr
    down = sr3("lab", "down", "--dir", root)
    assert down.returncode == 0, down.stderr
    assert lab_processes(lab_dir) == []
    assert not alive(zk_pid)


def test_two_lab_restarts_at_once_both_succeed(
    lab_dir: Path, wait_until: WaitUntil
) -> None:
    root = str(lab_dir)
    argv = [sys.executable, "-m", "sr3_cli", "lab", "restart", "node-3", "--dir", root]
    for round_ in range(ROUNDS):
        before = Lab.load(lab_dir)
        sigkill(before.zk_pid, wait_until)
        sigkill(before.nodes["node-3"].pid, wait_until)
        procs = [
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_environ(),
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=240) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, f"round {round_}: {out}{err}"
            assert "Traceback" not in err
        assert sorted(out.strip() for out, _ in outputs) == [
            "already running: node-3",
            "restarted node-3",
        ], f"round {round_}: {outputs}"
        after = Lab.load(lab_dir)
        assert after.zookeeper_running, f"round {round_}"
        assert after.nodes["node-3"].alive, f"round {round_}"
        assert zookeepers(lab_dir) == [after.zk_pid], f"round {round_}"
    status = sr3("status", "--lab", root)
    assert status.returncode == 0, status.stderr
