"""ONE real Apache Storm cluster (Nimbus + 1 supervisor, 2 slots) per test session.

``apache_storm`` starts it from the jars ``scripts/fetch-jars.sh`` fetched,
against the session's ZooKeeper (``zk_server``) under a znode root of its own,
and stops it (workers included) when the session ends. Tests that submit
topologies share it: they must kill what they submit, and may SIGKILL and
restart supervisor-1 (:meth:`ApacheStormCluster.restart_supervisor`) as long
as they leave it running. Nothing here skips: with no fetched jars or no java
the fixture fails, naming what is missing and how to get it.

Every worker of the cluster sees ``sr3.zk.hosts`` (the session ZooKeeper) and
``sr3.zk.chroot`` (:data:`RING_CHROOT`) in its Storm conf; a test that runs a
ring there passes its secret in the topology conf (``sr3.node.secret``).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.apache import ApacheStormCluster, StormHome
from zk.launcher import EmbeddedZooKeeper

#: The ring chroot the shared cluster's workers are pointed at.
RING_CHROOT = "/sr3/apache-storm-tests"
REPO = Path(__file__).resolve().parents[3]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the daemons' log tails to the report of a failed Storm test."""
    report = yield
    cluster = getattr(item, "funcargs", {}).get("apache_storm")
    if report.failed and isinstance(cluster, ApacheStormCluster):
        for name in ("nimbus", *(s.name for s in cluster.info.supervisors)):
            report.sections.append((f"Storm {name} (tail)", cluster.log_tail(name)))
    return report


@pytest.fixture(scope="session")
def storm_home() -> StormHome:
    """The fetched STORM_HOME; fails (never skips) when it is not fetched."""
    return StormHome.locate()


@pytest.fixture(scope="session")
def apache_storm(
    zk_server: EmbeddedZooKeeper,
    storm_home: StormHome,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ApacheStormCluster]:
    """The session's Storm cluster: Nimbus on a free port, supervisor-1 with 2 slots."""
    cluster = ApacheStormCluster(
        tmp_path_factory.mktemp("apache-storm"),
        zk_hosts=zk_server.hosts,
        zk_root=f"/storm-{uuid.uuid4().hex[:8]}",
        supervisors=1,
        slots=2,
        nimbus_port=0,
        home=storm_home,
        conf={"sr3.zk.hosts": zk_server.hosts, "sr3.zk.chroot": RING_CHROOT},
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def storm_cluster_factory(
    zk_server: EmbeddedZooKeeper, storm_home: StormHome, tmp_path: Path
) -> Iterator[Callable[..., ApacheStormCluster]]:
    """Return ``make(**options)``: a cluster of this test's own (not started).

    Every cluster it made is stopped at teardown.
    """
    made: list[ApacheStormCluster] = []

    def make(**options: Any) -> ApacheStormCluster:
        options.setdefault("zk_hosts", zk_server.hosts)
        options.setdefault("zk_root", f"/storm-{uuid.uuid4().hex[:8]}")
        options.setdefault("home", storm_home)
        cluster = ApacheStormCluster(tmp_path / f"storm-{len(made)}", **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


@pytest.fixture(scope="session")
def topology_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The jar of jvm/topology/pom.xml, built with Maven (as users without lein do).

    ``sparse submit -j`` uploads it.
    """
    out = tmp_path_factory.mktemp("topology-jar")
    proc = subprocess.run(  # noqa: S603
        ["mvn", "-B", "-q", "-f", str(REPO / "jvm" / "topology" / "pom.xml"),  # noqa: S607
         "package", f"-Dsr3.jar.dir={out}"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    jar = out / "sr3-topologies.jar"
    assert proc.returncode == 0 and jar.is_file(), proc.stdout + proc.stderr
    return jar
