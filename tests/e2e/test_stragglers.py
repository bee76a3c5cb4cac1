"""A SIGSTOPped counting task under each straggler policy: state and outputs stay exact.

Word count (``topologies/wordcount.py``) runs with ``sr3 run`` against a lab of
real ZooKeeper and ring node processes; once its first epoch committed, one of
its three counting tasks is SIGSTOPped (``os.kill``) and stays stopped until the
topology has processed on without it, or for a few seconds under ``off``.
Under ``duplicate`` a copy started from the last committed epoch takes over
(the stopped task is retired, so exactly three counting processes remain);
under ``restart`` the stopped task is killed and the topology rolls back. Either
way processing resumes (an epoch commits) before the task would have been
continued, and the committed state and the last outputs are the exact counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.wiring import RingAccess
from tests.conftest import _wait_until
from tests.e2e.conftest import require_zk
from tests.integration.conftest import running_lab
from topologies.wordcount import corpus

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parents[2] / "topologies" / "wordcount.py"
LINES = 2500
COUNT_TASKS = 3
TRUE_COUNTS = Counter(w for line in corpus(LINES, 8, 7) for w in line.split())
#: Upper bound of any wait of the test (a run that hangs fails, not stalls).
WAIT_S = 60.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module: runs are sequential."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("straggler-lab") / "lab", 3) as running:
        yield running


def _state_of(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state letter, command line) of a live process, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], cmdline


def counting_tasks(run_pid: int) -> list[int]:
    """Pids of the run's live counting-task processes (forked or executed)."""
    processes = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _state_of(int(entry))
            if found is not None:
                processes[int(entry)] = found
    # the run's children and theirs (tasks forked by its fork server)
    ours = {pid for pid, (ppid, _state, _cmd) in processes.items() if ppid == run_pid}
    ours |= {pid for pid, (ppid, _state, _cmd) in processes.items() if ppid in ours}
    return sorted(
        pid
        for pid in ours
        if processes[pid][1] != "Z" and "wordcount.Count" in processes[pid][2]
    )


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    _wait_until(predicate, timeout_s=WAIT_S, what=what)


class StoppedRun:
    """``sr3 run wordcount --json`` with one counting task SIGSTOPped mid-run."""

    def __init__(self, lab: Lab, policy: str, lag_s: float = 1.5) -> None:
        self.ring = RingAccess(lab.config(Sr3Config()))
        self.before = self.committed()
        env = dict(os.environ, SR3_LAB=str(lab.root))
        conf = {
            "wordcount.lines": LINES,
            "sr3.straggler.policy": policy,
            "sr3.straggler.lag.s": lag_s,
            "sr3.straggler.check.s": lag_s / 2,
            "sr3.checkpoint.interval.s": 0.3,
            "sr3.idle.quiet.s": 0.5,
        }
        argv = [sys.executable, "-m", "sr3_cli", "--log-level", "WARNING", "run"]
        argv += [str(TOPOLOGY), "--until-idle", "--json"]
        for key, value in conf.items():
            argv += ["-o", f"{key}={value}"]
        # stderr holds the run's warnings, shown when an assertion fails
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.victim = 0
        self.committed_at_cont = 0
        self.stderr = ""

    def committed(self) -> int:
        record = self.ring.committed("wordcount")
        return 0 if record is None else record.epoch

    def stop_one_counter(self) -> None:
        """SIGSTOP a counting task once the topology committed an epoch."""
        wait_until(lambda: self.committed() > self.before, "a first committed epoch")
        self.victim = counting_tasks(self.proc.pid)[0]
        os.kill(self.victim, signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT the stopped task, if it still exists."""
        self.committed_at_cont = self.committed()
        try:
            os.kill(self.victim, signal.SIGCONT)
        except ProcessLookupError:
            pass  # retired: killed while stopped

    def report(self) -> Any:
        out, err = self.proc.communicate(timeout=300)
        self.stderr = err
        if self.proc.returncode != 0:
            pytest.fail(f"sr3 run exited {self.proc.returncode}:\n{err[-4000:]}")
        return json.loads(out)

    def close(self) -> None:
        self.ring.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def stopped_run(lab: Lab) -> Iterator[Callable[..., StoppedRun]]:
    runs: list[StoppedRun] = []

    def start(policy: str, lag_s: float = 1.5) -> StoppedRun:
        run = StoppedRun(lab, policy, lag_s)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.victim:
            run.cont()
        run.close()


def assert_exact(lab: Lab, report: Any) -> None:
    """The committed state and the last output per word are the exact counts."""
    assert report["idle"], report.get("busy")
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        _, state = ring.committed_state("wordcount", "count")
    finally:
        ring.close()
    assert {key[0]: fields["n"] for key, fields in state.items()} == TRUE_COUNTS
    outputs = report["outputs"]["count"]
    assert {word: n for word, n in outputs.values()} == TRUE_COUNTS


def test_a_duplicate_takes_over_from_a_stopped_counter_exactly(
    stopped_run: Callable[..., StoppedRun], lab: Lab
) -> None:
    run = stopped_run("duplicate")
    run.stop_one_counter()
    # the duplicate reaches the live position and the stopped task is retired
    wait_until(
        lambda: run.victim not in counting_tasks(run.proc.pid),
        "the stopped task retired",
    )
    took_over_at = run.committed()
    wait_until(lambda: run.committed() > took_over_at, "an epoch after the takeover")
    remaining = counting_tasks(run.proc.pid)
    run.cont()
    report = run.report()
    assert len(remaining) == COUNT_TASKS  # one copy of each counting task
    assert len(report["stragglers"]) == 1, run.stderr[-3000:]
    [event] = report["stragglers"]
    assert (event["component"], event["policy"]) == ("count", "duplicate")
    assert event["winner"] == "duplicate"
    # an epoch committed after the takeover before the task was continued
    assert event["resumed_epoch"] <= run.committed_at_cont
    assert_exact(lab, report)
    # nothing was counted twice: no rollback replayed, no emit went out twice
    assert report["recoveries"] == []
    words = sum(TRUE_COUNTS.values())
    assert report["counters"]["count"]["acked"] == words
    assert report["counters"]["count"]["emitted"] == words


def test_restart_kills_a_stopped_counter_and_rolls_back_exactly(
    stopped_run: Callable[..., StoppedRun], lab: Lab
) -> None:
    run = stopped_run("restart")
    run.stop_one_counter()
    wait_until(
        lambda: run.victim not in counting_tasks(run.proc.pid),
        "the stopped task killed",
    )
    killed_at = run.committed()
    wait_until(lambda: run.committed() > killed_at, "an epoch after the rollback")
    run.cont()
    report = run.report()
    assert len(report["stragglers"]) == 1, run.stderr[-3000:]
    [event] = report["stragglers"]
    assert (event["component"], event["policy"]) == ("count", "restart")
    # an epoch committed after the takeover before the task was continued
    assert event["resumed_epoch"] <= run.committed_at_cont
    assert [r["component"] for r in report["recoveries"]] == ["count"]
    assert report["task_failures"] == []  # a straggler's restart is no crash
    assert_exact(lab, report)


def test_with_the_policy_off_a_stopped_counter_is_only_waited_for(
    stopped_run: Callable[..., StoppedRun], lab: Lab
) -> None:
    run = stopped_run("off", lag_s=0.5)
    run.stop_one_counter()
    # over sr3.straggler.lag.s and two checks: a policy would have acted by
    # then; under the ZooKeeper session timeout (2 s), so the task lives on
    time.sleep(1.5)
    assert run.victim in counting_tasks(run.proc.pid)
    run.cont()
    report = run.report()
    # no duplicate, no restart (the stopped task may still die on waking: its
    # ZooKeeper session can expire while it is stopped, and a rollback follows)
    assert report["stragglers"] == [], run.stderr[-3000:]
    assert_exact(lab, report)


def test_an_unknown_policy_is_refused_naming_the_accepted_ones(lab: Lab) -> None:
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sr3_cli",
            "run",
            str(TOPOLOGY),
            "--until-idle",
            "-o",
            "sr3.straggler.policy=speculate",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "sr3.straggler.policy" in proc.stderr
    assert "off, duplicate, restart" in proc.stderr
