"""``sr3 rebalance`` when the run it asked dies mid-rebalance, and the run after it.

A user rebalances a running ``sr3 run`` and the run is SIGKILLed (an operator,
the OOM killer) while the hand-over is under way. ``sr3 rebalance`` must not
wait out its ``-w``: it says at once that the run went away and how to go on.
The next run (``--resume``) retires the request the dead run left accepted and
ends with exact state: nothing committed was lost. Real ZooKeeper, ring node
processes, task subprocesses, SIGSTOP and SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.cluster import open_cluster
from sr3_cli.lab import Lab
from tests.conftest import WaitUntil
from tests.e2e.conftest import require_zk, sr3_json
from tests.e2e.test_rebalance import all_running, live
from tests.e2e.topologies.rebalance_parts import corpus
from tests.integration.conftest import running_lab
from zk.rebalances import ZkRebalanceStore

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "rebalance_topo.py"
NAME = "rebalance_topo"
LINES = 400


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("run-gone-lab") / "lab", 3) as running:
        yield running


def allow(gates: Path, lines: int) -> None:
    """Let the spouts emit up to their budgets (``rebalance_parts``' gates)."""
    for spout, budget in (("lines", lines), ("orders", 0), ("payments", 0)):
        staged = gates / f".{spout}"
        staged.write_text(str(budget), encoding="utf-8")
        staged.replace(gates / spout)


def start_run(lab: Lab, tmp: Path, *extra: str) -> subprocess.Popen[str]:
    """``sr3 run --until-idle --json`` in its own process group."""
    options = {
        "rebal.lines": LINES,
        "rebal.orders": 0,
        "rebal.delay.s": 0.002,
        "rebal.gates": tmp / "gates",
        "rebal.out": tmp / "out",
        "sr3.checkpoint.interval.s": 0.2,
        "sr3.idle.quiet.s": 0.5,
        "topology.subprocess.timeout.secs": 600,
    }
    argv = [sys.executable, "-m", "sr3_cli", "run", str(TOPOLOGY), "--until-idle"]
    argv += ["--timeout", "300", "--json", *extra]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def under_way(lab: Lab) -> dict[str, Any] | None:
    current = (live(lab) or {}).get("rebalance")
    return current if current and current["phase"] != "done" else None


def test_a_run_killed_mid_rebalance_is_reported_and_the_next_run_is_exact(
    lab: Lab, tmp_path: Path, wait_until: WaitUntil
) -> None:
    (tmp_path / "gates").mkdir()
    (tmp_path / "out").mkdir()
    run = start_run(lab, tmp_path)
    try:
        allow(tmp_path / "gates", 150)
        record = wait_until(
            lambda: all_running(lab), timeout_s=120, what="the run's tasks"
        )
        # a stopped count task cannot snapshot: the hand-over cannot finish,
        # so it is under way when the run dies
        stopped = int(record["ownership"]["count"][0]["pid"])
        os.kill(stopped, signal.SIGSTOP)
        env = dict(os.environ, SR3_LAB=str(lab.root))
        asked = subprocess.Popen(
            [sys.executable, "-m", "sr3_cli", "rebalance", NAME, "-e", "count=3"]
            + ["-w", "240"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        wait_until(lambda: under_way(lab), timeout_s=60, what="the rebalance")
        os.killpg(run.pid, signal.SIGKILL)
        os.kill(stopped, signal.SIGKILL)
        run.communicate(timeout=60)
        # the run's session ends within its ZooKeeper session timeout, far
        # less than -w; the command says what happened and what to do
        out, err = asked.communicate(timeout=180)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert asked.returncode == 2, (out, err)
    assert "Traceback" not in err
    assert "ended before it finished rebalance" in err
    assert "left accepted" in err
    assert "--resume" in err

    allow(tmp_path / "gates", LINES)
    resumed = start_run(lab, tmp_path, "--resume")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["idle"], report["busy"]
    # the request the dead run left accepted was retired by this run
    status = sr3_json(lab, "status")
    assert NAME not in status["runs"]
    request = rebalance_request(lab)
    assert request["state"] == "refused"
    assert "ended before finishing it" in request["detail"]
    counts = sr3_json(lab, "state", "dump", "--topology", NAME, "--component", "count")
    true_counts = Counter(w for line in corpus(LINES) for w in line.split())
    assert counts == {json.dumps([w]): {"n": n} for w, n in sorted(true_counts.items())}


def rebalance_request(lab: Lab) -> dict[str, Any]:
    """The topology's last rebalance request, as ZooKeeper holds it."""
    with open_cluster(lab.config(), create=False) as cluster:
        found = ZkRebalanceStore(cluster.session).get(NAME)
    assert found is not None
    return found[0].to_dict()
