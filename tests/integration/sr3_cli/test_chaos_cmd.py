"""``sr3 chaos`` as a user types it: a seeded campaign, its report, its bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def sr3(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def test_a_one_schedule_campaign_reports_and_replays_it(zk_server: object) -> None:
    # runs end after 0.5 s dry spouts, not 2 s: the word count's spout never pauses
    quiet = ["-o", "sr3.idle.quiet.s=0.5"]
    proc = sr3(
        "chaos", "--schedules", "3", "--seed", "2", "--only", "2", *quiet, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["schedules"], report["passed"], report["seed"]) == (1, 1, 2)
    (run,) = report["runs"]
    assert run["index"] == 2
    assert run["faults"] == [
        "kill-task split:0@1.3s",
        "restart-zk zookeeper@1.7s for 1.8s",
    ]
    assert "--seed 2 --schedules 3 --only 2" in run["replay"]
    assert "-o wordcount.lines=600" in run["replay"]
    assert report["schedules_per_hour"] > 0
    assert isinstance(report["recovery"], dict)
    # the word count's two failure-free runs end alike: held to it exactly
    assert report["compare"] == "exact"


def test_a_state_kept_in_arrival_order_is_compared_as_multisets(
    zk_server: object, tmp_path: Path
) -> None:
    # the join keeps each key's rows in the order they came from three spout
    # tasks through two merging tasks: two failure-free runs end in another
    # order, so the campaign holds each schedule to the same rows in any order
    proc = sr3(
        "chaos", "--topology", "tests/e2e/topologies/join_merge.py",
        "--schedules", "1", "--seed", "2912", "--json",
        "-o", "join.rows=300", "-o", f"join.out={tmp_path}",
        "-o", "sr3.idle.quiet.s=0.5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["schedules"], report["passed"]) == (1, 1), report["runs"]
    assert report["compare"] == "unordered"
    assert "order of list items or float rounding (join)" in report["compare_note"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--schedules", "2", "--only", "2"], "the campaign has schedules 0..1"),
        (["--topology", "nowhere.py"], "nowhere.py"),
        (["--schedules", "0"], "--schedules"),
        (["--kinds", "kill-everything"], "unknown fault kind kill-everything"),
        (["--kinds", "kill-worker"], "the local schedules draw none of them"),
        (["--nimbus", "127.0.0.1:6627"], "--nimbus is for --engine apache-storm"),
        (["--engine", "apache-storm"], "--engine apache-storm needs a Storm cluster"),
        (
            [
                "--engine",
                "apache-storm",
                "--nimbus",
                "127.0.0.1:6627",
                "--mode",
                "local",
            ],
            "--mode local: --engine apache-storm runs native checkpoints",
        ),
        (
            [
                "--engine",
                "apache-storm",
                "--nimbus",
                "127.0.0.1:6627",
                "--netns-faults",
            ],
            "which need a lab on network-namespace hosts",
        ),  # drawn on Apache Storm too, in a netns lab
        (
            ["--engine", "spark-standalone"],
            "--engine spark-standalone needs a Spark standalone cluster",
        ),
        (
            ["--engine", "spark-standalone", "--master", "local[2]"],
            "--master local[2]: give a standalone master's spark://HOST:PORT",
        ),
        (["--master", "spark://127.0.0.1:7077"], "--master is for --engine spark-st"),
        (
            [
                "--engine",
                "spark-standalone",
                "--master",
                "spark://h:7077",
                "--kinds",
                "kill-worker",
            ],
            "the spark-standalone schedules draw none of them",
        ),  # fmt: skip
    ],
)
def test_bad_requests_are_refused_before_any_run(args: list[str], says: str) -> None:
    proc = sr3("chaos", *args)
    assert proc.returncode == 2
    assert says in proc.stderr
