"""``sr3 rebalance`` changes a running topology's stateful task counts, exactly once.

One ``sr3 run`` of a topology holding a word count and an order/payment join
(``topologies/rebalance_topo.py``) runs in the background, as in another
shell; the test rebalances it 2 -> 4 -> 1 -> 3 with ``sr3 rebalance`` while it
runs, SIGKILLs a task during two of the hand-overs, and checks the final
committed state and the sinks' outputs against the true counts (what a
failure-free, never-rebalanced run computes, see ``test_exactly_once.py``).
Bad requests are refused with their error and change nothing. Real ZooKeeper,
real ring node processes, real task subprocesses and real SIGKILL/SIGSTOP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab
from tests.conftest import WaitUntil
from tests.e2e.conftest import require_zk, sr3, sr3_json
from tests.e2e.topologies.rebalance_parts import corpus, orders, payments
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "rebalance_topo.py"
NAME = "rebalance_topo"
LINES = 1500
ORDERS = 1000
TRUE_COUNTS = Counter(w for line in corpus(LINES) for w in line.split())
AMOUNTS = dict(orders(ORDERS))
PAID = dict(payments(ORDERS))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("rebalance-lab") / "lab", 3) as running:
        yield running


def stop(run: subprocess.Popen[str]) -> None:
    """Stop ``sr3 run`` as Ctrl-C would (it stops its cluster), else SIGKILL it."""
    run.send_signal(signal.SIGINT)
    try:
        run.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()


def allow(gates: Path, **budgets: int) -> None:
    """Let spouts emit up to ``budgets`` events (``rebalance_parts``' gates)."""
    for spout, budget in budgets.items():
        staged = gates / f".{spout}"
        staged.write_text(str(budget), encoding="utf-8")
        staged.replace(gates / spout)


def start_run(lab: Lab, out_dir: Path, gates: Path) -> subprocess.Popen[str]:
    """``sr3 run --until-idle --json`` in the background, as in another shell."""
    out_dir.mkdir(parents=True, exist_ok=True)
    gates.mkdir(parents=True, exist_ok=True)
    options = {
        "rebal.lines": LINES,
        "rebal.orders": ORDERS,
        "rebal.delay.s": 0.005,
        "rebal.gates": gates,
        "rebal.out": out_dir,
        "sr3.checkpoint.interval.s": 0.2,
        "sr3.idle.quiet.s": 0.5,
        # a task the test SIGSTOPs is not timed out while the test acts; the
        # epoch it stalls is abandoned after 5 s, and the next one opened
        "topology.subprocess.timeout.secs": 600,
        "sr3.checkpoint.timeout.s": 5,
    }
    argv = [sys.executable, "-m", "sr3_cli", "run", str(TOPOLOGY), "--until-idle"]
    argv += ["--timeout", "400", "--json"]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def live(lab: Lab) -> dict[str, Any] | None:
    """The running run's live record, as ``sr3 status --json`` shows it."""
    runs = sr3_json(lab, "status")["runs"]
    found = runs.get(NAME)
    return dict(found) if found is not None else None


def all_running(lab: Lab) -> dict[str, Any] | None:
    record = live(lab)
    if record is None or record["rebalance"] is not None:
        return None
    tasks = [t for ts in record["ownership"].values() for t in ts]
    return record if all(t["state"] == "running" for t in tasks) else None


def counts(record: dict[str, Any]) -> dict[str, int]:
    return {name: len(tasks) for name, tasks in record["ownership"].items()}


def rebalance(lab: Lab, *targets: str, wait: str = "120") -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "sr3_cli", "rebalance", NAME, "-w", wait, "--json"]
    for target in targets:
        argv += ["-e", target]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"sr3 rebalance failed: {out}\n{err[-3000:]}"
    request = json.loads(out)["request"]
    assert request["state"] == "done", request
    return dict(request["result"])


def refused(lab: Lab, *argv: str) -> str:
    proc = sr3(lab, "rebalance", *argv, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stderr


def killed_during_handover(
    lab: Lab,
    wait_until: WaitUntil,
    *targets: str,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Rebalance with the first count task SIGSTOPped, then SIGKILL it mid-way.

    A stopped task cannot snapshot, so no epoch commits and the rebalance
    cannot finish: it is under way when the kill lands, and ``meanwhile`` runs
    while it is.
    """
    record = all_running(lab)
    assert record is not None
    pid = int(record["ownership"]["count"][0]["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        proc = rebalance(lab, *targets)
        wait_until(lambda: _under_way(lab), timeout_s=60, what="the rebalance")
        # one rebalance at a time: a second request is refused, changes nothing
        says = refused(lab, NAME, "-e", "count=2")
        assert "already rebalancing" in says
        if meanwhile is not None:
            meanwhile()
        assert _under_way(lab), "the rebalance ended with a task stopped"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return finished(proc)


def _under_way(lab: Lab) -> dict[str, Any] | None:
    current = (live(lab) or {}).get("rebalance")
    return current if current and current["phase"] != "done" else None


def processed(lab: Lab, component: str) -> int:
    record = live(lab) or {}
    return sum(t["processed"] for t in record.get("ownership", {}).get(component, []))


def test_word_count_and_join_rebalanced_2_4_1_3_live_with_kills_stay_exact(
    lab: Lab, tmp_path: Path, wait_until: WaitUntil
) -> None:
    out_dir, gates = tmp_path / "out", tmp_path / "gates"
    run = start_run(lab, out_dir, gates)
    try:
        allow(gates, lines=300, orders=200, payments=200)
        before = wait_until(
            lambda: all_running(lab), timeout_s=120, what="the run's tasks"
        )
        assert counts(before) == {"count": 2, "join": 2}
        assert before["components"]["count"]["max"] == 256

        # bad requests: each gets its error and changes nothing
        assert "has no running run" in refused(lab, "nosuch", "-e", "count=2")
        assert "has no component 'nosuch'" in refused(lab, NAME, "-e", "nosuch=2")
        assert "is stateless" in refused(lab, NAME, "-e", "split=2")
        assert "1..256 tasks" in refused(lab, NAME, "-e", "count=257")
        assert "1..256 tasks" in refused(lab, NAME, "-e", "count=0")
        assert "COMPONENT=N" in refused(lab, NAME, "-e", "count")
        after = all_running(lab)
        assert after is not None
        assert counts(after) == {"count": 2, "join": 2}
        assert after["rebalances"] == 0

        allow(gates, lines=600, orders=400, payments=400)
        finished(rebalance(lab, "count=4", "join=4"))
        assert counts(wait_until(lambda: all_running(lab), timeout_s=60)) == {
            "count": 4,
            "join": 4,
        }
        allow(gates, lines=900, orders=500, payments=500)
        second = killed_during_handover(lab, wait_until, "count=1", "join=1")
        assert counts(wait_until(lambda: all_running(lab), timeout_s=60)) == {
            "count": 1,
            "join": 1,
        }

        def join_keeps_processing() -> None:
            # the join does not move: its task processes tuples while the
            # count's keys are being handed over
            seen = processed(lab, "join")
            allow(gates, orders=700, payments=700)
            wait_until(
                lambda: processed(lab, "join") > seen,
                timeout_s=60,
                what="the join to process during the hand-over",
            )

        third = killed_during_handover(
            lab, wait_until, "count=3", meanwhile=join_keeps_processing
        )
        allow(gates, lines=1200, orders=850, payments=850)
        finished(rebalance(lab, "join=3"))
        assert counts(wait_until(lambda: all_running(lab), timeout_s=60)) == {
            "count": 3,
            "join": 3,
        }
    except BaseException:
        stop(run)  # the run must not outlive a failed test
        raise
    finally:
        allow(gates, lines=LINES, orders=ORDERS, payments=ORDERS)
    out, err = run.communicate(timeout=400)
    assert run.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["idle"], report["busy"]

    moves = [
        {c: (t["from"], t["to"]) for c, t in r["targets"].items()}
        for r in report["rebalances"]
    ]
    assert moves == [
        {"count": (2, 4), "join": (2, 4)},
        {"count": (4, 1), "join": (4, 1)},
        {"count": (1, 3)},
        {"join": (1, 3)},
    ]
    for entry in report["rebalances"]:
        assert entry["phase"] == "done"
        assert entry["end_s"] >= entry["start_s"]
        assert entry["bytes_moved"] > 0
        assert entry["longest_key_pause_s"] > 0
    for killed in (second, third):
        assert killed["rollbacks"] >= 1
    assert len(report["recoveries"]) >= 2

    count_state = sr3_json(
        lab, "state", "dump", "--topology", NAME, "--component", "count"
    )
    assert count_state == {
        json.dumps([w]): {"n": n} for w, n in sorted(TRUE_COUNTS.items())
    }
    join_state = sr3_json(
        lab, "state", "dump", "--topology", NAME, "--component", "join"
    )
    assert join_state == {
        json.dumps([i]): {"amount": AMOUNTS[i], "paid": PAID[i], "joined": 1}
        for i in range(ORDERS)
    }
    last_count: dict[str, int] = {}
    for path in sorted(out_dir.glob("count_sink-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, n = line.partition("\t")
            last_count[word] = int(n)
    assert last_count == dict(TRUE_COUNTS)
    joined: dict[int, tuple[int, int]] = {}
    for path in sorted(out_dir.glob("join_sink-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            key, amount, paid = (int(v) for v in line.split("\t"))
            joined[key] = (amount, paid)
    assert joined == {i: (AMOUNTS[i], PAID[i]) for i in range(ORDERS)}
