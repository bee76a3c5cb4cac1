"""The ring node process (``sr3 node``) stops cleanly even with ZooKeeper gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zk.launcher import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.timeout(120)]


def test_a_node_stops_at_once_when_zookeeper_is_gone(
    tmp_path: Path, zk_server: EmbeddedZooKeeper
) -> None:
    # leaving the election and the member list would wait for ZooKeeper's whole
    # retry budget and end in an error: both znodes are ephemeral, so the node
    # leaves them to expire and exits cleanly
    secret = tmp_path / "secret"
    secret.write_text("s3cret-for-this-test\n")
    with EmbeddedZooKeeper(tmp_path / "zk") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sr3_cli",
                "node",
                "--zk",
                server.hosts,
                "--data-dir",
                str(tmp_path / "node"),
                "--secret-file",
                str(secret),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert node.stdout is not None
            ready = node.stdout.readline()
            assert ready.startswith("READY "), node.stderr.read() if node.stderr else ""
            server.stop()
            node.send_signal(signal.SIGTERM)
            _, stderr = node.communicate(timeout=60)
        finally:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert node.returncode == 0, stderr
    assert "leaves the ring when its session expires" in stderr
    assert "sr3: error" not in stderr
