"""The ``sr3`` command against a real lab and ZooKeeper, given bad input.

Each case runs the installed command as a user would (a subprocess) and checks
that it fails with a message naming the problem and its fix, exit code 2, no
traceback, and that the lab's stored state and processes are as before.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from tests.conftest import run_sr3
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
NODES = 3


@pytest.fixture(scope="module")
def module_lab(
    tmp_path_factory: pytest.TempPathFactory, zk_server: object
) -> Iterator[Lab]:
    """One lab of three ring nodes for the module, shared by its cases.

    Every case leaves it as it found it: refused commands change nothing, and
    the case that kills a node restarts it. (``zk_server`` only skips without
    ZooKeeper.)
    """
    with running_lab(tmp_path_factory.mktemp("cli-errors") / "lab", NODES) as lab:
        yield lab


@pytest.fixture
def lab(module_lab: Lab) -> Lab:
    """The module's lab, with its three nodes registered before each case."""
    current = Lab.load(module_lab.root)  # `sr3 lab restart` records new pids
    wait_for_members(current, NODES)
    return current


def sr3(
    *args: str, lab: Lab | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` (against ``lab`` when given); check it printed no traceback."""
    return run_sr3(*args, lab_root=None if lab is None else lab.root, env=env)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_zookeeper_fails_with_the_fix(tmp_path: Path) -> None:
    fast = {"SR3_ZK_CONNECT_TIMEOUT_S": "1"}
    zk = f"127.0.0.1:{closed_port()}"
    for args in (
        ["status", "--json"],
        ["snapshot", "get", "--owner", "x", "--json"],
        ["state", "dump", "--topology", "t", "--component", "c", "--json"],
    ):
        proc = sr3(*args, "--zk", zk, env=fast)
        assert proc.returncode == 2, proc.stderr
        assert f"no ZooKeeper session with {zk}" in proc.stderr
        assert "create chroot" not in proc.stderr  # a read creates nothing
        assert "kazoo" not in proc.stderr  # one message, not every retry
        error = json.loads(proc.stdout)["error"]
        assert "check sr3.zk.hosts" in error["message"]
    node = sr3("node", "--zk", zk, "--data-dir", str(tmp_path / "n"), env=fast)
    assert node.returncode == 2
    assert f"no ZooKeeper session with {zk}" in node.stderr


def test_a_wrong_secret_is_named(lab: Lab, tmp_path: Path) -> None:
    sr3("snapshot", "put", "--owner", "o", "--size", "64KB", lab=lab)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-secret", encoding="utf-8")
    for args in (
        ["--secret-file", str(wrong)],  # overrides the lab's own secret
        ["--zk", lab.zk_hosts, "--secret-file", str(wrong)],
        ["--zk", lab.zk_hosts],  # no secret at all
    ):
        proc = sr3("snapshot", "get", "--owner", "o", "--json", *args, lab=lab)
        assert proc.returncode == 2, proc.stderr
        assert "refused this command's secret" in proc.stderr
        assert (
            "refused this command's secret"
            in json.loads(proc.stdout)["error"]["message"]
        )
    for args in (
        ["state", "dump", "--topology", "t", "--component", "c"],
        ["run", str(WORDCOUNT), "--until-idle"],
    ):
        proc = sr3(*args, "--secret-file", str(wrong), lab=lab)
        assert proc.returncode == 2, proc.stderr
        assert f"secret (--secret-file {wrong})" in proc.stderr
    ok = sr3("snapshot", "get", "--owner", "o", "--verify", lab=lab)
    assert ok.returncode == 0, ok.stderr  # the snapshot is intact


def test_lab_kill_with_an_unknown_node_kills_none(lab: Lab) -> None:
    proc = sr3("lab", "kill", "node-2", "node-99", lab=lab)
    assert proc.returncode == 2
    assert "no node 'node-99'" in proc.stderr
    status = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert status["live_nodes"] == 3


def test_a_node_on_a_taken_port_names_the_fix(lab: Lab, tmp_path: Path) -> None:
    proc = sr3(
        "node",
        "--zk",
        lab.zk_hosts,
        "--port",
        str(lab.zk_port),
        "--data-dir",
        str(tmp_path / "n"),
        "--secret-file",
        str(lab.secret_file),
    )
    assert proc.returncode == 2
    assert "pick another --port" in proc.stderr


def test_a_second_node_with_a_live_nodes_id_is_refused(
    lab: Lab, tmp_path: Path
) -> None:
    # a copied data dir or a repeated --node-id must not knock node-1 out
    before = sr3("status", "--json", lab=lab)
    proc = sr3(
        "node",
        "--zk",
        lab.zk_hosts,
        "--data-dir",
        str(tmp_path / "other"),
        "--node-id",
        "node-1",
        "--secret-file",
        str(lab.secret_file),
    )
    assert proc.returncode == 2
    assert "node id 'node-1' is registered by a live node at" in proc.stderr
    after = sr3("status", "--json", lab=lab)
    assert json.loads(after.stdout)["nodes"] == json.loads(before.stdout)["nodes"]


def test_lab_up_twice_keeps_the_lab(lab: Lab) -> None:
    before = json.loads(sr3("status", "--json", lab=lab).stdout)
    again = sr3("lab", "up", "--dir", str(lab.root))  # no --nodes: keeps its 3
    assert again.returncode == 0, again.stderr
    assert "3 ring nodes" in again.stdout
    fewer = sr3("lab", "up", "--nodes", "1", "--dir", str(lab.root))
    assert fewer.returncode == 0, fewer.stderr
    assert "already has 3 ring nodes" in fewer.stdout
    after = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert after["nodes"] == before["nodes"]


def test_lab_kill_and_restart_say_what_they_did(lab: Lab) -> None:
    killed = sr3("lab", "kill", "node-2", "--dir", str(lab.root))
    assert killed.stdout.strip() == "killed node-2"
    again = sr3("lab", "kill", "node-2", "--dir", str(lab.root))
    assert again.stdout.strip() == "not running: node-2"
    restart = sr3("lab", "restart", "node-1", "node-2", "--dir", str(lab.root))
    assert restart.returncode == 0, restart.stderr
    assert "restarted node-2" in restart.stdout
    assert "already running: node-1" in restart.stdout


@pytest.mark.storm
@pytest.mark.slow
def test_a_run_refused_for_a_bad_kill_node_keeps_the_committed_state(
    lab: Lab,
) -> None:
    small = ["-o", "wordcount.lines=200", "-o", "sr3.idle.quiet.s=0.5"]
    first = sr3("run", str(WORDCOUNT), "--until-idle", *small, lab=lab)
    assert first.returncode == 0, first.stderr
    dump = ["state", "dump", "--topology", "wordcount", "--component", "count"]
    committed = json.loads(sr3(*dump, "--json", lab=lab).stdout)
    assert committed
    for bad in (["--kill-node", "node-99@1"], ["-o", "sr3.ring.vnodes=abc"]):
        proc = sr3("run", str(WORDCOUNT), "--until-idle", *small, *bad, lab=lab)
        assert proc.returncode == 2
        assert "node-99" in proc.stderr or "vnodes" in proc.stderr
        assert json.loads(sr3(*dump, "--json", lab=lab).stdout) == committed


def test_a_mistyped_chroot_is_named_and_not_created(lab: Lab) -> None:
    dump = ["state", "dump", "--topology", "t", "--component", "c"]
    for _ in range(2):  # the first read must not have created it
        for read in (["status"], dump):
            proc = sr3(*read, "--chroot", "/typo", lab=lab)
            assert proc.returncode == 2
            assert "its chroot znode /typo does not exist" in proc.stderr
    got = sr3("snapshot", "get", "--owner", "x", "--chroot", "/typo", "--json", lab=lab)
    assert got.returncode == 2
    assert "/typo" in json.loads(got.stdout)["error"]["message"]
