"""``sr3 chaos --engine spark-standalone``: a seeded campaign on a standalone cluster.

The campaign runs word count on the session's Spark standalone cluster (one
worker, 2 cores, through ``--master``), a driver process per run, once without
faults and once per schedule with the application's executor JVM SIGKILLed;
the ring is a lab of three node processes. Every schedule must end with the
failure-free run's committed state, and the worker's work dir must show the
executor it launched in place of the killed one. A build whose restores drop a
delta (``SR3_BROKEN_BUILD=drop-delta``, reaching the executors through
``spark.executorEnv``) must fail a schedule whose driver is SIGKILLed and
resumed from the ring. An executor kill alone cannot show a broken build:
Spark recovers it from its own state store, not from the ring. Nothing here
skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_bridge.standalone import StandaloneCluster
from sr3.recovery.transfer_plan import BROKEN_BUILD_ENV
from sr3_cli.lab import Lab
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.spark, pytest.mark.slow, pytest.mark.soak]

REPO = Path(__file__).resolve().parents[3]
#: With ``--kinds kill-executor`` schedule 1 is an executor kill 0.5 s after
#: the first commit; with kill-driver drawn too, schedule 0 is a driver kill at 2.9 s.
SEED = 8


@pytest.fixture(scope="module")
def ring_lab(
    tmp_path_factory: pytest.TempPathFactory, zk_server: object
) -> Iterator[Lab]:
    """Three ring nodes (and their own ZooKeeper) the campaign checkpoints into."""
    with running_lab(tmp_path_factory.mktemp("chaos-ring") / "lab") as lab:
        yield lab


def sr3_chaos(
    master: str, lab: Lab, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 (sr3 chaos, our arguments)
        [sys.executable, "-m", "sr3_cli", "chaos", "--engine", "spark-standalone",
         "--master", master, "--lab", str(lab.root), "--timeout", "150", *args,
         "--json"],
        cwd=REPO,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def executor_ids(cluster: StandaloneCluster) -> dict[str, set[str]]:
    """Each application's executor ids, from the worker's work dir."""
    return {
        app.name: {e.name for e in app.iterdir() if e.is_dir()}
        for app in cluster.work_dir.iterdir()
        if app.is_dir()
    }


@pytest.mark.timeout(900)
def test_a_campaign_kills_executors_and_ends_exact(
    standalone_cluster: StandaloneCluster, ring_lab: Lab
) -> None:
    cluster = standalone_cluster
    before = executor_ids(cluster)
    # schedule 1 of the seed alone: every driver start costs 20-30 s here
    proc = sr3_chaos(
        cluster.url, ring_lab, "--seed", str(SEED), "--schedules", "2",
        "--only", "1", "--kinds", "kill-executor",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert (report["schedules"], report["passed"]) == (1, 1), report["runs"]
    assert [run["faults"] for run in report["runs"]] == [
        ["kill-executor executor@0.5s"],
    ]
    # the worker launched a new executor in place of the killed one
    apps = {a: e for a, e in executor_ids(cluster).items() if a not in before}
    assert len(apps) == 2, apps  # the failure-free run and the schedule
    assert sorted(len(ids) for ids in apps.values()) == [1, 2], apps
    assert report["recovery"]["kill-executor"]["count"] == 1
    replay = report["runs"][0]["replay"]
    assert "--engine=spark-standalone" in replay
    assert f"--master={cluster.url}" in replay
    assert "--kinds=kill-executor" in replay
    assert not cluster.executor_pids()  # no driver left behind


@pytest.mark.timeout(900)
def test_a_broken_build_fails_a_driver_kill_resumed_from_the_ring(
    standalone_cluster: StandaloneCluster, ring_lab: Lab
) -> None:
    cluster = standalone_cluster
    proc = sr3_chaos(
        cluster.url, ring_lab, "--seed", str(SEED), "--schedules", "2",
        "--only", "0", "--kinds", "kill-executor,kill-driver",
        env={BROKEN_BUILD_ENV: "drop-delta"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    (run,) = report["runs"]
    assert run["faults"] == ["kill-driver driver@2.9s"]
    assert not run["passed"]
    assert "keys differ" in run["reason"], run["reason"]
    assert "--kinds=kill-executor,kill-driver" in run["replay"]
