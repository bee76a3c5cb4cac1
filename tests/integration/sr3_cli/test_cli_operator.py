"""The ``sr3`` command as a demanding operator uses it: Ctrl-C, odd data dirs.

Each case runs the installed command in a subprocess against a real lab and
ZooKeeper and checks what a user sees: one ``sr3: error:`` line naming the
problem and its fix, the documented exit code, no traceback, and a ring that
keeps serving what it stored.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab
from sr3_cli.processes import alive

pytestmark = [pytest.mark.zk]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"


def _environ(lab: Lab | None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    if lab is not None:
        environ["SR3_LAB"] = str(lab.root)
    return environ


def sr3(*args: str, lab: Lab | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` (against ``lab`` when given); check it printed no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=_environ(lab),
        timeout=240,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _default_sigint() -> None:
    # a test run from a background shell job inherits SIGINT ignored; a user's
    # terminal delivers it, so the command under test must see it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _replicas_of(lab: Lab, owner: str) -> list[Path]:
    return [
        path
        for node in lab.nodes.values()
        for path in (Path(node.data_dir) / "replicas").glob(f"{owner}@*")
    ]


def test_ctrl_c_during_snapshot_put_says_so_and_commits_nothing(
    lab: Lab, wait_until: Callable[..., Any]
) -> None:
    put = subprocess.Popen(
        [sys.executable, "-m", "sr3_cli", "snapshot", "put", "--owner", "big"]
        + ["--size", "400MB", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environ(lab),
        preexec_fn=_default_sigint,  # noqa: PLW1509 - only resets a signal
    )
    try:
        # Ctrl-C once the put is writing shards, as a user watching it would
        wait_until(lambda: _replicas_of(lab, "big"), timeout_s=120, what="a shard")
        put.send_signal(signal.SIGINT)
        out, err = put.communicate(timeout=120)
    finally:
        put.kill()
    assert put.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.startswith("sr3: error: interrupted (Ctrl-C)"), err
    assert "committed whole or not at all" in err
    error = json.loads(out)["error"]
    assert error["exit_code"] == 130
    assert error["type"] == "KeyboardInterrupt"
    got = sr3("snapshot", "get", "--owner", "big", "--json", lab=lab)
    assert got.returncode == 2, got.stderr
    assert "no committed snapshot" in json.loads(got.stdout)["error"]["message"]
    status = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert status["live_nodes"] == 3


def _node(lab: Lab, data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return sr3(
        "node",
        "--zk",
        lab.zk_hosts,
        "--chroot",
        lab.chroot,
        "--data-dir",
        str(data_dir),
        "--secret-file",
        str(lab.secret_file),
        *extra,
    )


def test_a_node_whose_data_dir_cannot_be_created_names_the_dir(
    lab: Lab, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a dir\n", encoding="utf-8")
    proc = _node(lab, blocker / "node")
    assert proc.returncode == 2, proc.stderr
    assert f"cannot use --data-dir {blocker / 'node'}" in proc.stderr
    assert "a directory it can create and write" in proc.stderr
    assert "--port" not in proc.stderr  # the port was never the problem


def test_a_node_with_a_damaged_id_file_is_refused(lab: Lab, tmp_path: Path) -> None:
    before = json.loads(sr3("status", "--json", lab=lab).stdout)
    for i, content in enumerate([b"../../etc\n", b"", b"\xff\xfe\x00junk"]):
        data_dir = tmp_path / f"node{i}"
        data_dir.mkdir()
        (data_dir / "node_id").write_bytes(content)
        proc = _node(lab, data_dir)
        assert proc.returncode == 2, proc.stderr
        assert f"{data_dir / 'node_id'} holds" in proc.stderr
        assert "not a node id" in proc.stderr
        assert "move the data dir away" in proc.stderr
    after = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert after["nodes"] == before["nodes"]  # nothing joined under a bogus id


def test_a_node_id_with_a_newline_is_refused(lab: Lab, tmp_path: Path) -> None:
    proc = _node(lab, tmp_path / "node", "--node-id", "node-9\n")
    assert proc.returncode == 2, proc.stderr
    assert "is invalid; use letters, digits" in proc.stderr
    assert not (tmp_path / "node" / "node_id").exists()


def test_lab_up_in_a_dir_it_cannot_create_names_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a dir\n", encoding="utf-8")
    proc = sr3("lab", "up", "--nodes", "1", "--dir", str(blocker / "lab"))
    assert proc.returncode == 2, proc.stderr
    assert f"cannot create a lab in {blocker / 'lab'}" in proc.stderr
    assert "give `sr3 lab up --dir` a directory you can write" in proc.stderr


def test_a_second_node_on_a_live_nodes_data_dir_is_refused(lab: Lab) -> None:
    # another chroot: nothing in ZooKeeper ties the two, only the data dir
    node = lab.nodes["node-1"]
    replicas = Path(node.data_dir) / "replicas"
    sr3("snapshot", "put", "--owner", "o", "--size", "256KB", lab=lab)
    stored = sorted(p.name for p in replicas.iterdir())
    proc = _node(lab, Path(node.data_dir), "--chroot", "/elsewhere")
    assert proc.returncode == 2, proc.stderr
    assert (
        f"--data-dir {node.data_dir} is in use by another ring node (pid {node.pid})"
        in proc.stderr
    )
    assert "give this one its own --data-dir" in proc.stderr
    assert sorted(p.name for p in replicas.iterdir()) == stored
    got = sr3("snapshot", "get", "--owner", "o", "--verify", lab=lab)
    assert got.returncode == 0, got.stderr


def test_a_node_with_another_secret_does_not_join_the_ring(
    lab: Lab, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-ring-secret\n", encoding="utf-8")
    proc = sr3(
        "node",
        "--zk",
        lab.zk_hosts,
        "--chroot",
        lab.chroot,
        "--data-dir",
        str(tmp_path / "n"),
        "--node-id",
        "stranger",
        "--secret-file",
        str(wrong),
    )
    assert proc.returncode == 2, proc.stderr
    assert "refused the secret of node stranger" in proc.stderr
    assert "give this node the ring's secret" in proc.stderr
    status = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert [n["id"] for n in status["nodes"]] == ["node-1", "node-2", "node-3"]
    assert status["under_replicated"] == 0


def test_snapshot_get_of_an_epoch_it_does_not_have_names_those_it_has(
    lab: Lab,
) -> None:
    put = sr3(
        "snapshot", "put", "--owner", "o", "--size", "64KB", "--epochs", "4",
        "--max-chain-length", "1", lab=lab,
    )  # fmt: skip
    assert put.returncode == 0, put.stderr  # 1 full, 2 delta, 3 full (gc 1, 2), 4
    gone = sr3("snapshot", "get", "--owner", "o", "--epoch", "1", "--json", lab=lab)
    assert gone.returncode == 2
    message = json.loads(gone.stdout)["error"]["message"]
    assert "epoch 1 of owner 'o' was garbage-collected" in message
    assert message.endswith("its committed epochs are 3, 4")
    later = sr3("snapshot", "get", "--owner", "o", "--epoch", "9", lab=lab)
    assert later.returncode == 2
    assert "no epoch 9 yet: its latest committed epoch is 4" in later.stderr
    ok = sr3("snapshot", "get", "--owner", "o", "--epoch", "3", "--verify", lab=lab)
    assert ok.returncode == 0, ok.stderr


def test_lab_restart_of_a_node_whose_data_dir_became_a_file(lab: Lab) -> None:
    assert sr3("lab", "kill", "node-2", lab=lab).returncode == 0
    data_dir = Path(lab.nodes["node-2"].data_dir)
    shutil.rmtree(data_dir)
    data_dir.write_text("not a dir\n", encoding="utf-8")
    proc = sr3("lab", "restart", "node-2", lab=lab)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot use node-2's data dir {data_dir}" in proc.stderr
    assert "move whatever is there away" in proc.stderr
    data_dir.unlink()
    again = sr3("lab", "restart", "node-2", lab=lab)
    assert again.returncode == 0, again.stderr


def _embedded_lab_state(tmp: Path) -> dict[str, Any] | None:
    """The state of the one embedded lab under ``tmp`` once its nodes are ready."""
    for state in tmp.glob("sr3-run-*/lab.json"):
        try:
            raw: dict[str, Any] = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # being written
        nodes = raw.get("nodes", {}).values()
        if nodes and all(n.get("port") for n in nodes):
            return raw
    return None


@pytest.mark.storm
def test_sigterm_during_a_run_stops_its_embedded_lab(
    tmp_path: Path, zk_server: object, wait_until: Callable[..., Any]
) -> None:
    # `timeout 60 sr3 run ...`, a cancelled CI job: the embedded ZooKeeper and
    # nodes run in sessions of their own, so only the command can stop them
    env = {**_environ(None), "TMPDIR": str(tmp_path)}
    run = subprocess.Popen(
        [sys.executable, "-m", "sr3_cli", "run", str(WORDCOUNT), "--duration", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    pids: list[int] = []
    try:
        state = wait_until(
            lambda: _embedded_lab_state(tmp_path), timeout_s=120, what="its lab"
        )
        pids = [state["zk_pid"], *(n["pid"] for n in state["nodes"].values())]
        run.terminate()
        _, err = run.communicate(timeout=120)
    finally:
        run.kill()
        for pid in pids:  # leaked by a broken build: do not leave them running
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == 143, err
    assert "Traceback" not in err, err
    assert "sr3: error: interrupted (SIGTERM)" in err
    assert [pid for pid in pids if alive(pid)] == []
    assert list(tmp_path.glob("sr3-run-*")) == []
