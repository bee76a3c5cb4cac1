"""Exactly-once word count under SIGKILLed tasks and ring nodes (``sr3 run``).

Each run is compared with the failure-free run: the committed final state (``sr3
state dump``) must be identical, and the last count the counter emitted for each
word must be the true count.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from tests.conftest import load_module
from tests.e2e.conftest import require_zk
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGIES = Path(__file__).parent / "topologies"
EXAMPLES = Path(__file__).parents[2] / "topologies"
TOPOLOGY = TOPOLOGIES / "exact_wc.py"
LINES = 1200
NODES = 3


def _corpus(lines: int) -> list[str]:
    module = load_module(TOPOLOGIES / "exact_parts.py", "exact_parts_for_test")
    return list(module.corpus(lines))


def sr3_json(lab: Lab, *args: str) -> Any:
    """Run ``sr3 ... --json`` against ``lab`` as a user would; parse its output."""
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"sr3 {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return json.loads(proc.stdout)


TRUE_COUNTS = dict(Counter(w for line in _corpus(LINES) for w in line.split()))
#: A run ends once its spouts were dry 0.5 s, not 2 s: they never pause, and it
#: still ends only after every kill and a final epoch committed after them.
QUIET = ("-o", "sr3.idle.quiet.s=0.5")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module: runs are sequential."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("exact-lab") / "lab", NODES) as running:
        yield running


def run(lab: Lab, out_dir: Path, *extra: str) -> Any:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = sr3_json(
        lab,
        "run",
        str(TOPOLOGY),
        "--until-idle",
        "--timeout",
        "120",
        "-o",
        f"exact.lines={LINES}",
        "-o",
        f"exact.out={out_dir}",
        "-o",
        "sr3.checkpoint.interval.s=0.2",
        *QUIET,
        *extra,
    )
    assert report["idle"], report
    return report


def dump(lab: Lab) -> Any:
    return sr3_json(
        lab, "state", "dump", "--topology", "exact_wc", "--component", "count"
    )


def last_emitted(out_dir: Path) -> dict[str, int]:
    last: dict[str, int] = {}
    for path in sorted(out_dir.glob("sink-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, count = line.partition("\t")
            if count.isdigit():
                last[word] = int(count)
    return last


@pytest.fixture(scope="module")
def baseline(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out_dir = tmp_path_factory.mktemp("baseline")
    report = run(lab, out_dir)
    assert report["recoveries"] == []
    assert report["checkpoints"]["count"] >= 1
    state = dump(lab)
    assert {k: v["n"] for k, v in state.items()} == {
        f'["{w}"]': n for w, n in TRUE_COUNTS.items()
    }
    assert last_emitted(out_dir) == TRUE_COUNTS
    return state


def check_exact(lab: Lab, baseline: Any, out_dir: Path, report: Any) -> None:
    assert report["recoveries"], "the kill caused no recovery"
    for recovery in report["recoveries"]:
        assert set(recovery["timeline"]) == {"detect_s", "restore_s", "replay_s"}
    assert dump(lab) == baseline
    assert last_emitted(out_dir) == TRUE_COUNTS


#: Seeds 0-2 kill count:1 at 0.96 s, count:0 at 0.77 s and count:0 at 0.29 s.
#: Seeds 3 and 4 (count:0 at 0.79 s and 0.50 s) repeated those: the same task
#: in the same span (test_two_tasks_killed_at_once kills count:0 at 0.6 s).
@pytest.mark.parametrize(
    "seed",
    # seeds 1 and 2 kill at other moments: `make test-soak`
    [
        0,
        pytest.param(1, marks=pytest.mark.soak),
        pytest.param(2, marks=pytest.mark.soak),
    ],
)
def test_stateful_task_killed_at_a_random_moment(
    lab: Lab, baseline: Any, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    index = rng.randrange(3)
    report = run(lab, tmp_path, "--kill", f"count:{index}@{rng.uniform(0.2, 1.2):.2f}")
    check_exact(lab, baseline, tmp_path, report)
    first = report["recoveries"][0]
    assert (first["cause"], first["component"], first["task"]) == (
        f"count:{index}",
        "count",
        index,
    )
    assert first["mechanism"] == "tree"
    assert [p["phase"] for p in first["phases"]] == ["detect", "restore", "replay"]


def test_two_tasks_killed_at_once(lab: Lab, baseline: Any, tmp_path: Path) -> None:
    report = run(lab, tmp_path, "--kill", "count:0@0.6", "--kill", "count:2@0.6")
    check_exact(lab, baseline, tmp_path, report)


def test_task_and_ring_node_killed_together(
    lab: Lab, baseline: Any, tmp_path: Path
) -> None:
    try:
        report = run(
            lab, tmp_path, "--kill", "count:1@0.5", "--kill-node", "node-2@0.5"
        )
    finally:
        lab.start_nodes(["node-2"])
        wait_for_members(lab, NODES)
    check_exact(lab, baseline, tmp_path, report)
    causes = " ".join(r["cause"] for r in report["recoveries"])
    assert "count:" in causes
    # under task scope (the default) the ring node's loss rolls nothing back:
    # the run saw it leave and only gave up the epoch open at that moment
    assert "ring node" not in causes, report["recoveries"]
    left = report["checkpoints"]["local_recovery"]["ring_nodes_left"]
    assert [n["node"] for n in left] == ["node-2"], left


def test_a_ring_node_loss_under_global_scope_rolls_back(
    lab: Lab, baseline: Any, tmp_path: Path
) -> None:
    try:
        report = run(
            lab, tmp_path, "-o", "sr3.recovery.scope=global",
            "--kill-node", "node-2@0.5",
        )  # fmt: skip
    finally:
        lab.start_nodes(["node-2"])
        wait_for_members(lab, NODES)
    check_exact(lab, baseline, tmp_path, report)
    assert [r["cause"] for r in report["recoveries"]] == ["ring node node-2"]


def test_a_stopped_run_resumes_exactly_once(
    lab: Lab, baseline: Any, tmp_path: Path
) -> None:
    common = [
        "-o",
        f"exact.lines={LINES}",
        "-o",
        f"exact.out={tmp_path}",
        "-o",
        "sr3.checkpoint.interval.s=0.2",
        *QUIET,
    ]
    # Stopped after 1.2 s, usually mid-corpus with some epochs committed; how far
    # it got varies with the machine, the outcome below must not.
    sr3_json(lab, "run", str(TOPOLOGY), "--duration", "1.2", *common)
    second = sr3_json(lab, "run", str(TOPOLOGY), "--resume", "--until-idle", *common)
    assert second["idle"]
    assert dump(lab) == baseline
    assert last_emitted(tmp_path) == TRUE_COUNTS


def _load_example(name: str) -> Any:
    module = load_module(EXAMPLES / f"{name}.py", f"{name}_for_test")
    return module


def test_ysb_window_counts_are_exact_after_a_kill(lab: Lab, tmp_path: Path) -> None:
    events = 6000
    report = sr3_json(
        lab,
        "run",
        str(EXAMPLES / "ysb.py"),
        "--until-idle",
        "--timeout",
        "120",
        "-o",
        f"ysb.events={events}",
        "-o",
        "sr3.checkpoint.interval.s=0.2",
        *QUIET,
        "--kill",
        "window_count:1@0.8",
    )
    assert report["idle"], report
    assert [r["mechanism"] for r in report["recoveries"]] == ["star"]
    ysb = _load_example("ysb")
    s = ysb.settings({"ysb.events": events})
    table = ysb.campaign_table(s["campaigns"], s["ads"], s["seed"])
    ads = sorted(table)
    truth: Counter[tuple[str, str]] = Counter()
    for i in range(events):
        event = ysb.event(i, ads, s["seed"], s["interval_ms"])
        if event[4] == "view":
            window = event[5] - event[5] % s["window_ms"]
            truth[(table[event[2]], str(window))] += 1
    state = sr3_json(
        lab, "state", "dump", "--topology", "ysb", "--component", "window_count"
    )
    got = {
        (json.loads(key)[0], window): count
        for key, windows in state.items()
        for window, count in windows.items()
    }
    assert got == dict(truth)
