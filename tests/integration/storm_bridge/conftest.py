"""Fixtures for the Storm bridge: test topologies, local clusters, a multilang driver.

``MultilangDriver`` plays Storm's side by hand against one real ``streamparse_run``
subprocess (no cluster), for golden protocol transcripts. ``make_cluster`` builds
:class:`LocalCluster` objects on the test topologies and stops them at teardown.
"""

from __future__ import annotations

import importlib
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest


def _import_project_package() -> None:
    """Import the real ``storm_bridge`` before this test dir can shadow it.

    ``tests/integration`` is on ``sys.path`` (for its conftest) and holds this
    ``storm_bridge/`` test dir without ``__init__.py``; Python's path finder would
    make it a namespace package ahead of the editable install, and names exported
    by ``storm_bridge/__init__.py`` (``ReplayableSpout``) would not import.
    """
    if "storm_bridge" in sys.modules:
        return
    saved = list(sys.path)
    here = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [p for p in sys.path if str(Path(p).resolve()) != here]
    try:
        importlib.import_module("storm_bridge")
    finally:
        sys.path[:] = saved


_import_project_package()

from storm_bridge.cluster import LocalCluster  # noqa: E402 (after the guard)
from storm_bridge.multilang import get_serializer  # noqa: E402

TOPOLOGIES = Path(__file__).parent / "topologies"
STREAMPARSE_RUN = Path(sys.executable).parent / "streamparse_run"
REPLY_TIMEOUT_S = 15.0


class MultilangDriver:
    """Storm's end of the pipes to one component subprocess, driven by a test."""

    def __init__(self, class_path: str, serializer: str, pid_dir: Path) -> None:
        self.serializer = get_serializer(serializer)
        self.pid_dir = pid_dir
        script = class_path if serializer == "json" else f"-s {serializer} {class_path}"
        env = dict(os.environ, PYTHONPATH=str(TOPOLOGIES))
        self.proc = subprocess.Popen(
            [str(STREAMPARSE_RUN), script],
            cwd=TOPOLOGIES,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._replies: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for message in self.serializer.iter_messages(
            self.proc.stdout, component="driven", task_id=0
        ):
            self._replies.put(message)
        self._replies.put(EOFError())

    def send(self, message: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(self.serializer.encode(message))
        self.proc.stdin.flush()

    def recv(self) -> Any:
        reply = self._replies.get(timeout=REPLY_TIMEOUT_S)
        if isinstance(reply, EOFError):
            raise reply
        return reply

    def recv_until(self, predicate: Callable[[Any], bool]) -> list[Any]:
        """Replies up to and including the first one matching ``predicate``."""
        replies = [self.recv()]
        while not predicate(replies[-1]):
            replies.append(self.recv())
        return replies

    def handshake(self, conf: Mapping[str, Any], context: Mapping[str, Any]) -> int:
        self.send(
            {"pidDir": str(self.pid_dir), "conf": dict(conf), "context": dict(context)}
        )
        reply = self.recv()
        assert set(reply) == {"pid"}
        return int(reply["pid"])

    def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout=REPLY_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def drive(tmp_path: Path) -> Iterator[Callable[[str, str], MultilangDriver]]:
    """Return ``drive(class_path, serializer)`` starting a driven subprocess."""
    drivers: list[MultilangDriver] = []

    def start(class_path: str, serializer: str) -> MultilangDriver:
        driver = MultilangDriver(class_path, serializer, tmp_path)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.close()


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """Directory where the test bolts write what they saw."""
    path = tmp_path / "out"
    path.mkdir()
    return path


@pytest.fixture
def make_cluster(out_dir: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Return ``make_cluster(topology_stem, conf=None, **kwargs)``; stops them all.

    Spouts dry for 0.5 s (not the default 2 s) count as done, unless
    ``conf`` sets ``sr3.idle.quiet.s``: the test spouts emit a fixed list at once.
    """
    clusters: list[LocalCluster] = []

    def make(
        stem: str, conf: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> LocalCluster:
        full_conf = {
            "sbt.out_dir": str(out_dir),
            "sr3.idle.quiet.s": 0.5,
            **(conf or {}),
        }
        cluster = LocalCluster(TOPOLOGIES / f"{stem}.py", full_conf, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def read_counts(out_dir: Path) -> Callable[[str], dict[str, int]]:
    """Return ``read_counts(prefix)``: final counts in ``<prefix>-<task>.txt``."""

    def read(prefix: str = "count") -> dict[str, int]:
        counts: dict[str, int] = {}
        for path in out_dir.glob(f"{prefix}-*.txt"):
            for line in path.read_text().splitlines():
                word, count = line.rsplit(" ", 1)
                counts[word] = max(counts.get(word, 0), int(count))
        return counts

    return read
