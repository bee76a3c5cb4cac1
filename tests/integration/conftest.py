"""Integration fixtures: one real ZooKeeper per test session, one chroot per test.

The server is Debian's ``zookeeper`` package started by :class:`EmbeddedZooKeeper`
(tickTime 200 ms, so sessions can be as short as 0.4 s). Without the package the
ZooKeeper tests skip, unless ``SR3_REQUIRE_ZK=1`` (CI) turns that into a failure.
Helpers are fixtures (``zk_connect``, ``expire_session``, ``zk_restart``, and
``wait_until`` from tests/conftest.py) so tests need no imports from here.

One Spark standalone cluster (a master and one worker, 2 cores, 2 GiB) is shared
by the session through ``standalone_cluster``: it takes ~9 s to start, and the
executor kills the tests inflict leave it usable (the worker launches a
replacement). Each test gets it idle, restarted if a test left it down.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from spark_bridge.spark_install import SparkMissingError
from spark_bridge.standalone import StandaloneCluster
from sr3.config import ZkConfig
from sr3.errors import ZooKeeperMissingError
from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from tests.conftest import REPO_ROOT, WaitUntil
from zk.client import ZkSession, connect
from zk.launcher import EmbeddedZooKeeper


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the ZooKeeper log tail to the report of a failed ZooKeeper test."""
    report = yield
    server = getattr(item, "funcargs", {}).get("zk_server")
    if report.failed and isinstance(server, EmbeddedZooKeeper):
        report.sections.append(("ZooKeeper log (tail)", server.log_tail(40)))
    return report


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """Run one loopback ZooKeeper for the whole test session."""
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperMissingError as exc:
        if os.environ.get("SR3_REQUIRE_ZK") == "1":
            pytest.fail(f"SR3_REQUIRE_ZK=1 but ZooKeeper cannot start: {exc}")
        pytest.skip(f"ZooKeeper is not installed: {exc}")
    yield server
    server.stop()


@pytest.fixture
def zk_config(zk_server: EmbeddedZooKeeper) -> ZkConfig:
    """Return a config for the shared server with a chroot of this test's own."""
    return ZkConfig(
        hosts=zk_server.hosts,
        chroot=f"/t{uuid.uuid4().hex}",
        session_timeout_s=2.0,
        connect_timeout_s=10.0,
    )


@pytest.fixture
def zk_connect(zk_config: ZkConfig) -> Iterator[Callable[..., ZkSession]]:
    """Return ``zk_connect(**config_overrides)``: a new session, closed at teardown."""
    sessions: list[ZkSession] = []

    def open_session(**overrides: Any) -> ZkSession:
        session = connect(replace(zk_config, **overrides))
        sessions.append(session)
        return session

    yield open_session
    for session in sessions:
        session.close()


@pytest.fixture
def zk_session(zk_connect: Callable[..., ZkSession]) -> ZkSession:
    """Return a session on this test's chroot."""
    return zk_connect()


def _expire(session: ZkSession) -> int:
    """Expire ``session`` on the server (cloned-session trick); return its old id."""
    sid, passwd = session.client.client_id
    clone = KazooClient(hosts=session.hosts, client_id=(sid, passwd))
    clone.start(timeout=5)
    clone.stop()  # closing the clone closes the shared session server-side
    clone.close()
    return int(sid)


@pytest.fixture
def expire_server_side() -> Callable[[ZkSession], int]:
    """Return ``expire(session)``: kill it server-side and return at once.

    The client learns of it on its next request (which kazoo then fails with
    ``SessionExpiredError``), or at its next ping. Returns the old session id.
    """
    return _expire


@pytest.fixture
def expire_session(wait_until: WaitUntil) -> Callable[[ZkSession], int]:
    """Return ``expire_session(session)``: kill it server-side, wait for a new one.

    Returns the new session id once the client has reconnected.
    """

    def expire(session: ZkSession) -> int:
        old = _expire(session)
        return int(
            wait_until(
                lambda: (
                    session.connected
                    and session.session_id not in (None, old)
                    and session.session_id
                ),
                what="a new session after expiry",
            )
        )

    return expire


@pytest.fixture
def zk_restart(
    zk_server: EmbeddedZooKeeper,
) -> Iterator[Callable[..., None]]:
    """Return ``restart(down_s, while_down=None)``: stop the shared server, wait, start.

    The server comes back on the same port and data dir, so sessions whose timeout
    exceeds the outage survive. ``while_down()`` runs during the outage. The
    server is running again after the test whatever happened.
    """

    def restart(down_s: float, while_down: Callable[[], object] | None = None) -> None:
        zk_server.stop()
        started = time.monotonic()
        try:
            if while_down is not None:
                while_down()
            time.sleep(max(0.0, down_s - (time.monotonic() - started)))  # the outage
        finally:
            zk_server.start()

    yield restart
    if not zk_server.is_running():
        zk_server.start()


@contextmanager
def running_lab(
    root: Path,
    nodes: int = 3,
    *,
    log_level: str = "WARNING",
    zk_hosts: str | None = None,
) -> Iterator[Lab]:
    """Run a lab of ``nodes`` ring nodes in ``root``.

    With ``zk_hosts`` (the session's ZooKeeper, as ``sr3 lab up --zk`` does) the
    lab uses that ZooKeeper under a chroot of its own; without, it starts its
    own (tests that stop or kill it). The nodes log at ``log_level`` to
    ``<data dir>/node.log``. On exit it stops what the lab's state file lists
    then, so a test may grow or restart the lab through the command line.
    """
    lab = Lab(root=root)
    root.mkdir(parents=True, exist_ok=True)
    lab.save()
    try:
        if zk_hosts:
            lab.use_zookeeper(zk_hosts)
        lab.start_zookeeper()
        lab.add_nodes(nodes)
        lab.start_nodes(sorted(lab.nodes), log_level=log_level)
        wait_for_members(lab, nodes)
        yield lab
    finally:
        current = Lab.load(root) if (root / "lab.json").exists() else lab
        current.stop_nodes()
        current.stop_zookeeper()


def shared_zookeeper(request: pytest.FixtureRequest, server: object) -> str | None:
    """The session ZooKeeper's address for a test's lab; None: the lab runs its own.

    Labs share the session's server under chroots of their own (each saves a
    ZooKeeper JVM start and stop, ~0.8 s); a test marked ``own_zookeeper``
    (it stops, kills or moves its lab's) gets one of its own.
    """
    if request.node.get_closest_marker("own_zookeeper"):
        return None
    return server.hosts if isinstance(server, EmbeddedZooKeeper) else None


@pytest.fixture
def lab(
    tmp_path: Path, zk_server: EmbeddedZooKeeper, request: pytest.FixtureRequest
) -> Iterator[Lab]:
    """A lab of three ring nodes on the session's ZooKeeper (see shared_zookeeper)."""
    zk_hosts = shared_zookeeper(request, zk_server)
    with running_lab(tmp_path / "lab", zk_hosts=zk_hosts) as running:
        yield running


def start_standalone(root: Path, *, cores: int, memory: str) -> StandaloneCluster:
    """Start a standalone master and one worker whose executors import this checkout.

    Java or pyspark missing fails the test, naming them: never a skip.
    """
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # in standalone mode the driver's PYTHONPATH does not reach the executors
    env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *paths])}
    try:
        return StandaloneCluster(root, cores=cores, memory=memory, env=env).start()
    except SparkMissingError as exc:
        pytest.fail(f"no standalone Spark here (needs Java 17 and pyspark): {exc}")


@pytest.fixture(scope="session")
def standalone_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[StandaloneCluster]:
    """The session's one standalone cluster; tests use ``standalone_cluster``."""
    started = start_standalone(
        tmp_path_factory.mktemp("standalone"), cores=2, memory="2g"
    )
    yield started
    started.stop()


#: How long a test waits for the previous test's executors to exit
STANDALONE_IDLE_TIMEOUT_S = 120.0


@pytest.fixture
def standalone_cluster(
    standalone_session: StandaloneCluster, wait_until: WaitUntil
) -> StandaloneCluster:
    """Return the session's standalone cluster, up and running no executor.

    A test that SIGKILLed the master or worker gets them restarted (on new
    ports: use ``.url``); executors of an earlier test's finished driver are
    waited out, so every test starts with the worker's cores free.
    """
    standalone_session.start()  # does nothing while master and worker run
    wait_until(
        lambda: not standalone_session.executor_pids(),
        timeout_s=STANDALONE_IDLE_TIMEOUT_S,
        what=f"the executors of an earlier test to exit ({standalone_session!r})",
    )
    return standalone_session
