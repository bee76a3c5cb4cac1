"""``sr3 chaos --engine apache-storm``: a seeded campaign on the real Storm cluster.

The campaign submits word count to the session's Apache Storm cluster
(``apache_storm``, through ``--nimbus``) once without faults, then once per
schedule with its worker JVM and the native coordinator's Python process
SIGKILLed; the ring is a lab of three node processes. Every schedule must end
with the failure-free run's committed state, and a build whose recoveries drop
a delta (``SR3_BROKEN_BUILD=drop-delta``, reaching Storm's workers through the
topology's ``topology.environment``) must fail the campaign. Nothing here skips.
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

from sr3.recovery.transfer_plan import BROKEN_BUILD_ENV
from sr3_cli.lab import Lab
from storm_bridge.apache import ApacheStormCluster
from storm_bridge.sparse.submit import NimbusSession
from tests.integration.conftest import running_lab

pytestmark = [
    pytest.mark.zk,
    pytest.mark.apache_storm,
    pytest.mark.slow,
    pytest.mark.soak,
]

REPO = Path(__file__).resolve().parents[3]
#: Two schedules: the coordinator killed in one, the worker JVM in the other.
SEED = 8


@pytest.fixture(scope="module")
def ring_lab(
    tmp_path_factory: pytest.TempPathFactory, zk_server: object
) -> Iterator[Lab]:
    """Three ring nodes (and their own ZooKeeper) the campaign checkpoints into."""
    with running_lab(tmp_path_factory.mktemp("chaos-ring") / "lab") as lab:
        yield lab


def sr3_chaos(
    nimbus: str, lab: Lab, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    venv_bin = str(Path(sys.executable).parent)
    return subprocess.run(  # noqa: S603
        [sys.executable, "-m", "sr3_cli", "chaos", "--engine", "apache-storm",
         "--nimbus", nimbus, "--lab", str(lab.root), "--timeout", "150", *args,
         "--json"],
        cwd=REPO,
        env={**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
             "LEIN_ROOT": "1", "PYTHONWARNINGS": "ignore", **(env or {})},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def test_a_campaign_on_storm_kills_workers_and_the_coordinator_exactly(
    apache_storm: ApacheStormCluster, ring_lab: Lab
) -> None:
    proc = sr3_chaos(
        apache_storm.nimbus, ring_lab, "--seed", str(SEED), "--schedules", "2",
        "--kinds", "kill-worker,kill-coordinator",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert (report["schedules"], report["passed"]) == (2, 2), report["runs"]
    kinds = {f.split()[0] for run in report["runs"] for f in run["faults"]}
    assert kinds == {"kill-worker", "kill-coordinator"}
    # each kill is a recovery of its own kind, timed from the kill to a commit
    assert {"kill-worker", "kill-coordinator"} <= set(report["recovery"])
    replay = report["runs"][1]["replay"]
    assert "--engine=apache-storm" in replay
    assert f"--nimbus={apache_storm.nimbus}" in replay
    assert "--kinds=kill-worker,kill-coordinator" in replay
    assert "wordcount" not in NimbusSession(apache_storm.nimbus).topologies()


def test_a_broken_build_fails_the_campaign_on_storm(
    apache_storm: ApacheStormCluster, ring_lab: Lab
) -> None:
    # one schedule, its worker killed while lines flow: the restore that drops
    # the newest delta loses counts the replay from the committed offsets
    # does not give back
    proc = sr3_chaos(
        apache_storm.nimbus, ring_lab, "--seed", str(SEED), "--schedules", "2",
        "--only", "0", "--kinds", "kill-worker,kill-coordinator",
        env={BROKEN_BUILD_ENV: "drop-delta"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    (run,) = report["runs"]
    assert run["faults"] == ["kill-coordinator coordinator@2.9s"]
    assert not run["passed"]
    assert "keys differ" in run["reason"], run["reason"]
