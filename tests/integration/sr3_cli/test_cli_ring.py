"""The ``sr3`` command against a ring given foreign or hand-made data.

Each case runs the installed command in a subprocess against a real lab and
ZooKeeper (membership znodes written by another version or by hand) and checks
what a user sees: the command works or fails with one line naming the problem
and its fix, no traceback, and the ring keeps what it stored.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sr3.client import NodeClient
from sr3.codec import pack_meta, unpack_meta
from sr3.errors import ProtocolError
from sr3.ports import NodeInfo
from sr3_cli.lab import Lab
from tests.conftest import run_sr3
from zk.client import ZkSession, connect
from zk.membership import ZkMembership

pytestmark = [pytest.mark.zk]


def sr3(
    *args: str, lab: Lab, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` against ``lab``; check it printed no traceback."""
    return run_sr3(*args, lab_root=lab.root, env=env)


@contextmanager
def lab_session(lab: Lab) -> Iterator[ZkSession]:
    session = connect(lab.config().zk)
    try:
        yield session
    finally:
        session.close()


def set_capacity(session: ZkSession, node_id: str, capacity: object) -> None:
    """Rewrite a live member's registration as another version or a hand would."""
    path = session.paths.member(node_id)
    data, _stat = session.client.get(path)
    session.client.set(path, pack_meta({**unpack_meta(data), "capacity": capacity}))


def test_a_member_with_an_unplaceable_capacity_does_not_break_the_ring(
    lab: Lab,
) -> None:
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", lab=lab)
    assert put.returncode == 0, put.stderr
    with lab_session(lab) as session:
        for capacity in (0, -3, "many", 10**12):
            set_capacity(session, "node-2", capacity)
            again = sr3("snapshot", "put", "--owner", "p", "--size", "64KB", lab=lab)
            assert again.returncode == 0, (capacity, again.stderr)
            assert "member node-2 (/members/node-2) registered capacity" in (
                again.stderr
            )
            assert f"{capacity!r}, outside 1..100" in again.stderr
            assert "sr3 node --capacity N" in again.stderr
            got = sr3("snapshot", "get", "--owner", "o", "--verify", lab=lab)
            assert got.returncode == 0, (capacity, got.stderr)
            status = json.loads(sr3("status", "--json", lab=lab).stdout)
            assert status["live_nodes"] == 3
            assert status["under_replicated"] == 0
            node2 = [n for n in status["nodes"] if n["id"] == "node-2"]
            assert node2[0]["capacity"] in (1, 100)
        set_capacity(session, "node-2", "3")  # a number as text: placeable
        status = sr3("status", "--json", lab=lab)
    assert status.stderr == ""
    node2 = [n for n in json.loads(status.stdout)["nodes"] if n["id"] == "node-2"]
    assert node2[0]["capacity"] == 3


def test_a_ring_node_pulls_only_from_ring_members(lab: Lab) -> None:
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", lab=lab)
    assert put.returncode == 0, put.stderr
    config = lab.config()
    ports = {n: info.port or 0 for n, info in Lab.load(lab.root).nodes.items()}
    with NodeClient("127.0.0.1", ports["node-2"], config=config.node) as source:
        shard = source.list()[0]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        elsewhere = listener.getsockname()[1]
        with NodeClient("127.0.0.1", ports["node-1"], config=config.node) as node:
            assert node.delete(shard.shard_id) is True
            with pytest.raises(ProtocolError, match="not the address of a current"):
                node.pull(shard.shard_id, shard.crc32, "127.0.0.1", elsewhere)
            # a member's address is fine (repair may have copied it back already)
            node.pull(shard.shard_id, shard.crc32, "127.0.0.1", ports["node-2"])
            assert node.has(shard.shard_id) is not None
            assert node.ping() == "node-1"
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()  # node-1 never connected to the named address
    got = sr3("snapshot", "get", "--owner", "o", "--verify", lab=lab)
    assert got.returncode == 0, got.stderr


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failed_command_prints_one_error_line(lab: Lab) -> None:
    put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", lab=lab)
    assert put.returncode == 0, put.stderr
    assert put.stderr == ""
    with lab_session(lab) as session:
        # two members that hold most of the ring and never answer: a write
        # misses its quorum after a warning per replica it could not write
        for ghost in ("ghost-1", "ghost-2"):
            info = NodeInfo(ghost, "127.0.0.1", closed_port(), capacity=100)
            ZkMembership(session).register(info)
        failed = sr3("snapshot", "put", "--owner", "p", "--size", "64KB", lab=lab)
        verbose = sr3("-v", "snapshot", "put", "--owner", "p", "--size", "1KB", lab=lab)
    assert failed.returncode == 2
    lines = failed.stderr.splitlines()
    assert len(lines) == 1, failed.stderr  # not every replica write that failed
    assert lines[0].startswith("sr3: error: shard p@1#0: 1 of 3 replicas")
    assert "check that enough ring nodes are up" in lines[0]
    assert verbose.returncode == 2
    assert "WARNING sr3.replication: write of p@1#0 to ghost-" in verbose.stderr
    assert verbose.stderr.splitlines()[-1].startswith("sr3: error: shard p@1#0")
    got = sr3("snapshot", "get", "--owner", "o", "--verify", lab=lab)
    assert got.returncode == 0, got.stderr
    assert got.stderr == ""


def test_config_from_the_environment_names_the_variable(lab: Lab) -> None:
    bad = sr3("status", "--json", lab=lab, env={"SR3_NODE_IO_TIMEOUT_S": "soon"})
    assert bad.returncode == 2
    message = json.loads(bad.stdout)["error"]["message"]
    assert "sr3.node.io.timeout.s='soon' is not a number" in message
    assert "environment variable SR3_NODE_IO_TIMEOUT_S='soon'" in message
    typo = sr3("status", lab=lab, env={"SR3_RING_REPLICATION_FACTR": "1"})
    assert typo.returncode == 0, typo.stderr
    assert typo.stderr.splitlines() == [
        "sr3: warning: environment variable SR3_RING_REPLICATION_FACTR sets no "
        "sr3 config key and is ignored; did you mean SR3_RING_REPLICATION_FACTOR?"
    ]


def test_names_and_chroots_zookeeper_or_a_node_would_refuse_are_named(
    lab: Lab,
) -> None:
    not_utf8 = os.fsdecode(b"\xff")  # as sys.argv holds a Latin-1 byte
    for owner, problem in (
        ("x" * 5000, "a name of 5000 bytes is too long; use at most 1024 bytes"),
        (not_utf8, "b'\\xff' is not UTF-8 text; give the name in UTF-8"),
    ):
        for args in (["put", "--size", "1KB"], ["get"]):
            proc = sr3("snapshot", *args, "--owner", owner, "--json", lab=lab)
            assert proc.returncode == 2
            assert f"argument --owner: {problem}" in proc.stderr
            assert "internal error" not in proc.stderr
            assert json.loads(proc.stdout)["error"]["type"] == "UsageError"
    for chroot in (f"/{not_utf8}", "/a//b", "/sr3/.."):
        proc = sr3("status", "--chroot", chroot, lab=lab)
        assert proc.returncode == 2
        assert f"sr3.zk.chroot={chroot!r} is invalid: ZooKeeper refuses" in (
            proc.stderr
        )
    status = json.loads(sr3("status", "--json", lab=lab).stdout)
    assert status["owners"] == 0


def test_hand_made_member_znodes_do_not_join_or_hide_nodes(lab: Lab) -> None:
    real = {n["id"]: n["address"] for n in status_of(lab)["nodes"]}
    with lab_session(lab) as session:
        for name, fields in (
            ("ghost", {"node_id": "ghost", "host": "127.0.0.1", "port": 0}),
            ("impostor", {"node_id": "node-1", "host": "10.255.255.1", "port": 9}),
        ):
            path = session.paths.member(name)
            session.client.create(path, pack_meta(fields), ephemeral=True)
        put = sr3("snapshot", "put", "--owner", "o", "--size", "64KB", lab=lab)
        status = status_of(lab)
    assert put.returncode == 0, put.stderr
    assert "member znode /members/ghost is unreadable, skipped: address " in (
        put.stderr
    )
    assert "it names node 'node-1', not 'impostor'; delete the znode" in put.stderr
    assert status["live_nodes"] == 3
    assert {n["id"]: n["address"] for n in status["nodes"]} == real
    assert status["under_replicated"] == 0


def status_of(lab: Lab) -> dict[str, Any]:
    proc = sr3("status", "--json", lab=lab)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_status_names_an_owner_whose_records_are_damaged(lab: Lab) -> None:
    for owner in ("good", "bad"):
        put = sr3("snapshot", "put", "--owner", owner, "--size", "64KB", lab=lab)
        assert put.returncode == 0, put.stderr
    with lab_session(lab) as session:
        directory = session.paths.shards("bad")
        record = f"{directory}/{session.client.get_children(directory)[0]}"
        session.client.set(record, b"\x01not a shard record")
        status = sr3("status", "--json", lab=lab)
        text = sr3("status", lab=lab)
    assert status.returncode == 0, status.stderr
    result = json.loads(status.stdout)
    assert result["unreadable_owners"] == ["bad"]
    assert result["shards"] == 1  # good's
    assert result["under_replicated"] == 0
    assert "owners whose shard records cannot be read (not counted): 'bad'" in (
        text.stdout
    )
    assert "the record is damaged or was written by another sr3 version" in (
        text.stderr
    )
    got = sr3("snapshot", "get", "--owner", "good", "--verify", lab=lab)
    assert got.returncode == 0, got.stderr


def test_a_secret_file_that_is_no_secret_is_refused_unread(
    lab: Lab, tmp_path: Path
) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * 1_000_000)  # as /dev/zero would be, without its end
    for path in (big, Path("/dev/zero")):
        proc = sr3("status", "--secret-file", str(path), lab=lab)
        assert proc.returncode == 2
        assert proc.stderr == (
            f"sr3: error: secret file {path} holds more than 4096 bytes; a ring "
            "secret is one line (a lab writes 64 hex digits): give --secret-file "
            "the ring's secret file\n"
        )
