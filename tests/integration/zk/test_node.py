"""The ring node process (``sr3 node``) stops cleanly even with ZooKeeper gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from zk.launcher import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.timeout(120)]


@contextmanager
def _serving_node(
    tmp_path: Path, server: EmbeddedZooKeeper, **env: str
) -> Iterator[subprocess.Popen[str]]:
    """Start ``sr3 node`` on ``server``; yield it once it announced READY."""
    secret = tmp_path / "secret"
    secret.write_text("s3cret-for-this-test\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    node = subprocess.Popen(  # noqa: S603 (this checkout's own CLI)
        [sys.executable, "-m", "sr3_cli", "node", "--zk", server.hosts,
         "--data-dir", str(tmp_path / "node"), "--secret-file", str(secret)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**clean, **env},
    )  # fmt: skip
    try:
        assert node.stdout is not None
        ready = node.stdout.readline()
        assert ready.startswith("READY "), node.stderr.read() if node.stderr else ""
        yield node
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()


def _stops_cleanly(node: subprocess.Popen[str]) -> None:
    """SIGTERM the node: it exits 0, leaving its znodes to expire."""
    node.send_signal(signal.SIGTERM)
    _, stderr = node.communicate(timeout=60)
    assert node.returncode == 0, stderr
    assert "leaves the ring when its session expires" in stderr
    assert "sr3: error" not in stderr


def test_a_node_stops_at_once_when_zookeeper_is_gone(
    tmp_path: Path, zk_server: EmbeddedZooKeeper
) -> None:
    # leaving the election and the member list would wait for ZooKeeper's whole
    # retry budget and end in an error: both znodes are ephemeral, so the node
    # leaves them to expire and exits cleanly
    with (
        EmbeddedZooKeeper(tmp_path / "zk") as server,
        _serving_node(tmp_path, server) as node,
    ):
        server.stop()
        _stops_cleanly(node)


def test_a_node_stops_at_once_when_zookeeper_hangs(tmp_path: Path) -> None:
    # a stopped (SIGSTOP) server still accepts connections and answers nothing:
    # the node still thinks it is connected when told to stop, as when `sr3 lab
    # down` signals ZooKeeper and the nodes at once. Leaving the election and the
    # member list gets one bounded attempt each, not the retry budget (here
    # 300 s, which the node used to wait out)
    with (
        EmbeddedZooKeeper(tmp_path / "zk") as server,
        _serving_node(tmp_path, server, SR3_ZK_CONNECT_TIMEOUT_S="300") as node,
    ):
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            _stops_cleanly(node)
        finally:
            os.kill(server.pid, signal.SIGCONT)
