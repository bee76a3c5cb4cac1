"""``sr3 run`` fails a run whose tasks died on their own and did not come back.

Storm restarts a dead worker forever; a run of the local cluster is judged at
its end instead. These run the ``sr3`` command as a user would, on a lab of
real ZooKeeper and ring nodes, with real ``streamparse_run`` tasks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab

pytestmark = [pytest.mark.zk, pytest.mark.storm]

TOPOLOGY = Path(__file__).parent / "topologies" / "sbt_init_faults.py"
SENTENCES = json.dumps(["one two", "three"])


def sr3_run(lab: Lab, out_dir: Path, *extra: str) -> tuple[int, Any, str]:
    """Run ``sr3 run --json`` on the test topology; return (status, report, stderr)."""
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sr3_cli",
            "run",
            str(TOPOLOGY),
            "--until-idle",
            "--timeout",
            "120",
            "-o",
            f"sbt.out_dir={out_dir}",
            "-o",
            f"sbt.sentences={SENTENCES}",
            "-o",
            "sr3.idle.quiet.s=0.5",  # not 2 s dry: the spout never pauses
            *extra,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_a_bolt_whose_initialize_always_raises_fails_the_run(
    lab: Lab, out_dir: Path
) -> None:
    status, report, stderr = sr3_run(lab, out_dir, "-o", "sbt.init_fails=-1")
    assert status == 1, stderr
    (failure,) = report["task_failures"]
    assert failure["component"] == "flaky_bolt"
    assert failure["task"] == 0
    assert failure["outcome"] in {"crash_loop", "down"}
    assert failure["restarts"] >= 1
    assert "ConnectionError: cannot reach db.example:5432" in failure["last_error"]
    (line,) = [x for x in stderr.splitlines() if x.startswith("sr3 run: ")]
    assert "component 'flaky_bolt' task 0" in line
    assert "ConnectionError: cannot reach db.example:5432" in line
    assert f"restarted {failure['restarts']} time(s)" in line


def test_a_bolt_that_came_back_and_a_killed_task_leave_the_run_a_success(
    lab: Lab, out_dir: Path
) -> None:
    status, report, stderr = sr3_run(
        lab, out_dir, "-o", "sbt.init_fails=1", "--kill", "record_bolt:0@1"
    )
    assert status == 0, stderr
    assert report["idle"] is True
    assert report["counters"]["record_bolt"]["restarts"] >= 1  # the --kill
    (failure,) = report["task_failures"]  # the kill is not the task's own death
    assert failure["component"] == "flaky_bolt"
    assert failure["outcome"] == "recovered"
    assert failure["deaths"] == 1
    assert "cannot reach db.example:5432 (start 1)" in failure["last_error"]
    assert not [x for x in stderr.splitlines() if x.startswith("sr3 run: ")]
