"""``sr3 lab`` when its state file and the processes it names disagree.

Each case runs the installed command in a subprocess against a real lab (its
own ZooKeeper and ring node processes) and checks what the user sees and which
processes run afterwards.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from sr3_cli.lab_nodes import node_log, spawn_node
from sr3_cli.processes import alive, lab_processes, terminate
from tests.conftest import run_sr3 as sr3

# each case stops, kills or moves the lab's ZooKeeper: the lab runs its own
pytestmark = [pytest.mark.zk, pytest.mark.own_zookeeper]


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process of another program, as one that got a recycled pid."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_pid_in_lab_json_now_another_programs_is_left_alone(
    lab: Lab, stranger: subprocess.Popen[bytes]
) -> None:
    root = str(lab.root)
    assert sr3("lab", "kill", "node-3", "--dir", root).returncode == 0
    state = json.loads((lab.root / "lab.json").read_text())
    state["nodes"]["node-3"]["pid"] = stranger.pid  # the pid went to `sleep`
    (lab.root / "lab.json").write_text(json.dumps(state))
    killed = sr3("lab", "kill", "node-3", "--dir", root)
    assert killed.stdout.strip() == "not running: node-3"
    restart = sr3("lab", "restart", "node-3", "--dir", root)
    assert restart.stdout.strip() == "restarted node-3", restart.stderr
    down = sr3("lab", "down", "--dir", root)
    assert down.returncode == 0, down.stderr
    assert stranger.poll() is None  # never signalled
    assert not any(node.alive for node in Lab.load(lab.root).nodes.values())


@pytest.fixture
def doomed_lab(lab: Lab) -> Iterator[Lab]:
    """The lab, its dir made again for the fixture's clean-up after the test."""
    yield lab
    for pid in lab_processes(lab.root):  # the test failed before `lab down`
        terminate(pid)
    lab.root.mkdir(parents=True, exist_ok=True)


def test_lab_down_stops_a_lab_whose_state_file_is_gone(doomed_lab: Lab) -> None:
    lab = doomed_lab
    pids = [lab.zk_pid] + [node.pid for node in lab.nodes.values()]
    assert all(alive(pid) for pid in pids)
    shutil.rmtree(lab.root)  # the whole lab dir, while everything runs
    down = sr3("lab", "down", "--dir", str(lab.root))
    assert down.returncode == 0, down.stderr
    assert f"no readable lab.json in {lab.root}: stopped" in down.stdout
    assert not any(alive(pid) for pid in pids)
    again = sr3("lab", "down", "--dir", str(lab.root))
    assert again.returncode == 2
    assert again.stderr == (
        f"sr3: error: no lab in {lab.root}: run `sr3 lab up --dir {lab.root}` first\n"
    )


def test_lab_down_with_a_damaged_state_file_stops_its_processes(
    doomed_lab: Lab,
) -> None:
    lab = doomed_lab
    pids = [lab.zk_pid] + [node.pid for node in lab.nodes.values()]
    (lab.root / "lab.json").write_text('{"zk_port": 1', encoding="utf-8")
    down = sr3("lab", "down", "--dir", str(lab.root), "--purge")
    assert down.returncode == 0, down.stderr
    assert not any(alive(pid) for pid in pids)
    assert not lab.root.exists()


def listen_on(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_lab_up_moves_off_ports_another_process_took(lab: Lab) -> None:
    root = str(lab.root)
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", "--lab", root)
    assert put.returncode == 0, put.stderr
    assert sr3("lab", "down", "--dir", root).returncode == 0
    node_port = lab.nodes["node-1"].port
    assert node_port is not None
    with listen_on(lab.zk_port), listen_on(node_port):  # taken while it was down
        up = sr3("lab", "up", "--dir", root)
        assert up.returncode == 0, up.stderr
        moved = Lab.load(lab.root)
        assert moved.zk_port != lab.zk_port
        assert moved.nodes["node-1"].port != node_port
        assert f"ZooKeeper {moved.zk_hosts}, 3 ring nodes" in up.stdout
        assert up.stderr.splitlines() == [
            f"sr3: warning: the lab's ZooKeeper port {lab.zk_port} is taken by "
            "another process; it listens on a new one (`--zk` users: see the "
            "address printed)",
            f"sr3: warning: ring node node-1's port {node_port} is taken by another "
            "process; it listens on a new one",
        ]
        got = sr3("snapshot", "get", "--owner", "o", "--verify", "--lab", root)
        assert got.returncode == 0, got.stderr


def test_lab_up_says_why_in_one_line_what_keeps_it_from_starting(lab: Lab) -> None:
    root = str(lab.root)
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", "--lab", root)
    assert put.returncode == 0, put.stderr
    assert sr3("lab", "down", "--dir", root).returncode == 0
    lab.secret_file.write_text("\n", encoding="utf-8")
    up = sr3("lab", "up", "--dir", root)
    assert up.returncode == 2
    assert up.stderr == (
        f"sr3: error: the lab's secret file {lab.secret_file} is empty; delete it "
        "and run `sr3 lab up` again, which writes a new one (stored replicas stay "
        "readable: the secret only authenticates connections)\n"
    )
    lab.secret_file.unlink()
    id_file = Path(lab.nodes["node-2"].data_dir) / "node_id"
    id_file.write_text("not an id!\n", encoding="utf-8")
    up = sr3("lab", "up", "--dir", root)
    assert up.returncode == 2
    assert up.stderr.startswith(
        f"sr3: error: ring node node-2 did not start: {id_file} holds 'not an id!'"
    )
    assert len(up.stderr.splitlines()) == 1, up.stderr
    id_file.write_text("node-2\n", encoding="utf-8")
    up = sr3("lab", "up", "--dir", root)
    assert up.returncode == 0, up.stderr
    got = sr3("snapshot", "get", "--owner", "o", "--verify", "--lab", root)
    assert got.returncode == 0, got.stderr


def test_a_node_whose_replica_dir_became_a_file_names_the_fix(
    lab: Lab, tmp_path: Path
) -> None:
    root = str(lab.root)
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", "--lab", root)
    assert put.returncode == 0, put.stderr
    assert sr3("lab", "kill", "node-3", "--dir", root).returncode == 0
    replicas = Path(lab.nodes["node-3"].data_dir) / "replicas"
    replicas.rename(tmp_path / "kept")
    replicas.write_text("not a directory", encoding="utf-8")
    restart = sr3("lab", "restart", "node-3", "--dir", root)
    assert restart.returncode == 2
    assert len(restart.stderr.splitlines()) == 1, restart.stderr
    assert restart.stderr.startswith("sr3: error: ring node node-3 did not start: ")
    assert f"{replicas} and {replicas.parent}/quarantine must be directories" in (
        restart.stderr
    )
    replicas.unlink()
    (tmp_path / "kept").rename(replicas)
    restart = sr3("lab", "restart", "node-3", "--dir", root)
    assert restart.returncode == 0, restart.stderr
    got = sr3("snapshot", "get", "--owner", "o", "--verify", "--lab", root)
    assert got.returncode == 0, got.stderr


def test_a_node_serves_on_when_the_command_that_started_it_went_away(lab: Lab) -> None:
    # `sr3 lab up` reads each node's READY line, then closes its stdout; one
    # that failed on another node, or was interrupted, exits before reading
    root = str(lab.root)
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", "--lab", root)
    assert put.returncode == 0, put.stderr
    assert sr3("lab", "kill", "node-3", "--dir", root).returncode == 0
    with Lab.update(lab.root) as current:
        node = current.nodes["node-3"]
        proc, offset = spawn_node(
            node, zk_hosts=current.zk_hosts, chroot=current.chroot,
            secret_file=current.secret_file, log_level="INFO",
        )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # the starter is gone before the node is ready
    log = node_log(node)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        with log.open("rb") as f:
            f.seek(offset)
            if b"nobody reads this node's stdout" in f.read():
                break
        time.sleep(0.1)
    assert proc.poll() is None, log.read_text(encoding="utf-8")[-2000:]
    wait_for_members(lab, 3)
    assert sr3("lab", "kill", "node-1", "--dir", root).returncode == 0
    got = sr3("snapshot", "get", "--owner", "o", "--verify", "--lab", root)
    assert got.returncode == 0, got.stderr
