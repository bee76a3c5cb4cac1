"""Key-groups routing: ``sr3 rebalance`` moves key groups between live tasks.

The topology of ``test_rebalance.py`` (a word count and an order/payment join)
runs under ``sr3.rebalance.routing = key-groups``: its stateful bolts' tuples
route by key group through a table, and a rebalance moves key groups in
batches, one batch an epoch, without restarting the tasks that stay. The test
rebalances it 2 -> 4 -> 1 -> 3 while it runs, SIGKILLs the receiver during
the 4 -> 1 hand-over, the sender during the 1 -> 3 one and a ring node during
the join's 1 -> 3 one, and checks the
final committed state and the sinks' outputs against the true counts. Real
ZooKeeper, ring node processes, task subprocesses and SIGKILL/SIGSTOP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab
from tests.conftest import WaitUntil
from tests.e2e.conftest import require_zk, sr3, sr3_json
from tests.e2e.test_rebalance import (
    AMOUNTS,
    LINES,
    NAME,
    ORDERS,
    PAID,
    TOPOLOGY,
    TRUE_COUNTS,
    allow,
    counts,
    finished,
    live,
    rebalance,
    refused,
)
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

#: key groups moved per epoch: small, so a hand-over spans several epochs
BATCH = 8


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("kg-lab") / "lab", 3) as running:
        yield running


def start_run(
    lab: Lab, out_dir: Path, gates: Path, *extra: str, **settings: Any
) -> subprocess.Popen[str]:
    """``sr3 run --until-idle --json`` under key-groups routing, in the background.

    ``settings``: ``-o`` values over the module's (``_`` for ``.`` in a key).
    """
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
        "topology.subprocess.timeout.secs": 600,
        "sr3.checkpoint.timeout.s": 5,
        "sr3.rebalance.routing": "key-groups",
        "sr3.rebalance.batch.key.groups": BATCH,
        **{key.replace("_", "."): value for key, value in settings.items()},
    }
    argv = [sys.executable, "-m", "sr3_cli", "run", str(TOPOLOGY), "--until-idle"]
    argv += ["--timeout", "400", "--json", *extra]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    env = dict(os.environ, SR3_LAB=str(lab.root))
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def ended(run: subprocess.Popen[str]) -> dict[str, Any]:
    """The run's report once it ended by itself, idle."""
    out, err = run.communicate(timeout=400)
    assert run.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out)
    assert report["idle"], report["busy"]
    return report


def running(lab: Lab, *, under_way: bool = False) -> dict[str, Any] | None:
    """The live record once every task runs (and a rebalance is, or is not, on)."""
    record = live(lab)
    if record is None:
        return None
    current = record["rebalance"]
    on = current is not None and current["phase"] != "done"
    if on != under_way:
        return None
    tasks = [t for ts in record["ownership"].values() for t in ts]
    return record if all(t["state"] == "running" for t in tasks) else None


def pids(record: dict[str, Any], component: str) -> list[int]:
    return [int(t["pid"]) for t in record["ownership"][component]]


def key_groups(record: dict[str, Any], component: str) -> list[str]:
    return [t["key_groups"] for t in record["ownership"][component]]


def phase(lab: Lab) -> str | None:
    current = (live(lab) or {}).get("rebalance")
    return current["phase"] if current else None


def test_word_count_and_join_move_key_groups_2_4_1_3_live_with_kills_stay_exact(
    lab: Lab, tmp_path: Path, wait_until: WaitUntil
) -> None:
    out_dir, gates = tmp_path / "out", tmp_path / "gates"
    run = start_run(lab, out_dir, gates)
    try:
        allow(gates, lines=300, orders=200, payments=200)
        before = wait_until(lambda: running(lab), timeout_s=120, what="the tasks")
        assert counts(before) == {"count": 2, "join": 2}
        # the start table: contiguous ranges of the 256 key groups
        assert key_groups(before, "count") == ["0-127", "128-255"]
        assert "1..256 tasks" in refused(lab, NAME, "-e", "count=257")

        # 2 -> 4: the two tasks stay in their processes, keep half their key
        # groups and go on processing while the other half moves
        proc = rebalance(lab, "count=4", "join=4")
        wait_until(lambda: phase(lab), timeout_s=60, what="the rebalance")
        allow(gates, lines=600, orders=400, payments=400)  # flows during it
        first = finished(proc)
        after = wait_until(lambda: running(lab), timeout_s=60, what="4 tasks")
        assert counts(after) == {"count": 4, "join": 4}
        for name in ("count", "join"):
            assert pids(after, name)[:2] == pids(before, name), name
            owned = key_groups(after, name)
            assert all(owned), owned
        assert first["kept_processed"] > 0

        # 4 -> 1 with the receiver (index 0) stopped, then killed mid-way
        allow(gates, lines=900, orders=500, payments=500)
        record = running(lab)
        assert record is not None
        receiver = pids(record, "count")[0]
        os.kill(receiver, signal.SIGSTOP)
        try:
            proc = rebalance(lab, "count=1", "join=1")
            wait_until(
                lambda: phase(lab) == "holding", timeout_s=60, what="a batch held"
            )
            assert "already rebalancing" in refused(lab, NAME, "-e", "count=2")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(receiver, signal.SIGKILL)
        second = finished(proc)
        assert second["rollbacks"] >= 1
        single = wait_until(lambda: running(lab), timeout_s=60, what="1 task")
        assert counts(single) == {"count": 1, "join": 1}
        assert key_groups(single, "count") == ["0-255"]

        # 1 -> 3: once the new tasks run, the sender (index 0) is stopped as
        # its batch is held, then killed mid-way
        proc = rebalance(lab, "count=3")

        def three_running() -> dict[str, Any] | None:
            record = running(lab, under_way=True)
            return record if record and counts(record)["count"] == 3 else None

        grown = wait_until(three_running, timeout_s=60, what="the new tasks")
        sender = pids(grown, "count")[0]
        os.kill(sender, signal.SIGSTOP)
        try:
            wait_until(
                lambda: phase(lab) in ("holding", "done"),
                timeout_s=60,
                what="a batch held",
            )
            assert phase(lab) == "holding", "the rebalance ended before the kill"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(sender, signal.SIGKILL)
        third = finished(proc)
        assert third["rollbacks"] >= 1
        # join 1 -> 3 with a ring node SIGKILLed once it is under way: a count
        # task is stopped meanwhile (then killed: a rollback), so no epoch
        # commits and it cannot end first; its batches move on two ring nodes
        allow(gates, lines=1200, orders=850, payments=850)
        record = wait_until(lambda: running(lab), timeout_s=60, what="the tasks")
        # (count:0 died twice already: a third death would count as a crash loop)
        frozen = pids(record, "count")[1]
        os.kill(frozen, signal.SIGSTOP)
        try:
            proc = rebalance(lab, "join=3")
            wait_until(lambda: phase(lab), timeout_s=60, what="the rebalance")
            lab.kill_nodes(["node-3"])
            assert phase(lab) in ("armed", "holding"), "it ended before the kill"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
        finished(proc)
        sr3(lab, "lab", "restart", "node-3")
        final = wait_until(lambda: running(lab), timeout_s=60, what="3 tasks")
        assert counts(final) == {"count": 3, "join": 3}
    finally:
        allow(gates, lines=LINES, orders=ORDERS, payments=ORDERS)
    report = ended(run)

    for entry in report["rebalances"]:
        assert entry["phase"] == "done"
        assert entry["how"] == "key-groups"
        assert entry["batches"] >= 1
        assert entry["key_groups_moved"] > 0
        assert entry["bytes_moved"] > 0
    moved = [entry["key_groups_moved"] for entry in report["rebalances"]]
    # the fewest moves: half of each component's 256 key groups to the new
    # tasks, then all but task 0's 64, then 2 x 85 of them out of 256
    assert moved == [2 * 128, 2 * 192, 170, 170]
    assert len(report["recoveries"]) >= 2

    assert_exact(lab, out_dir)

    # a run resuming at the file's parallelism (2 tasks, where the record's
    # table names 3) takes each key group from the owner the table put it on
    resumed = ended(start_run(lab, tmp_path / "out2", gates, "--resume"))
    assert resumed["checkpoints"]["count"] >= 1
    assert_exact(lab, None)


def assert_exact(lab: Lab, out_dir: Path | None) -> None:
    """The committed state (and the sinks' outputs) equal a failure-free run's."""
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
    if out_dir is None:
        return
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


def test_a_batch_switched_before_its_epoch_commits_goes_back_with_a_rollback(
    lab: Lab, tmp_path: Path, wait_until: WaitUntil
) -> None:
    """A batch switches once its own tasks are past the epoch, before the commit.

    Its epoch's commit records the table from before the switch (that epoch's
    snapshots hold the batch at its senders). Epochs here are 2 s apart, so
    the join task stopped as soon as a batch is seen switched most likely
    let that batch's epoch commit, and no later one can. count's next batch
    still switches (its senders' snapshots are durable, its receivers past
    the barrier); a receiver killed then rolls back to the last commit, the
    switch epoch or the one before: state and outputs stay exact.
    """
    out_dir, gates = tmp_path / "out", tmp_path / "gates"
    run = start_run(
        lab,
        out_dir,
        gates,
        sr3_checkpoint_interval_s=2,
        sr3_rebalance_batch_key_groups=32,
    )
    try:
        allow(gates, lines=400, orders=300, payments=300)
        before = wait_until(lambda: running(lab), timeout_s=120, what="the tasks")
        proc = rebalance(lab, "count=4")

        def batches() -> int:
            current = (live(lab) or {}).get("rebalance") or {}
            return int(current.get("batches") or 0)

        wait_until(lambda: batches() >= 1, timeout_s=60, what="a first batch")
        frozen = pids(before, "join")[0]
        os.kill(frozen, signal.SIGSTOP)
        try:
            # the next batch holds two epochs later, once the next epoch was
            # abandoned (sr3.checkpoint.timeout.s): its switch cannot commit
            seen = batches()
            wait_until(lambda: batches() > seen, timeout_s=60, what="a next batch")
            record = running(lab, under_way=True)
            assert record is not None, "the rebalance ended with a task stopped"
            receiver = pids(record, "count")[2]
            os.kill(receiver, signal.SIGKILL)
        finally:
            os.kill(frozen, signal.SIGCONT)
        allow(gates, lines=LINES, orders=ORDERS, payments=ORDERS)
        entry = finished(proc)
        assert entry["rollbacks"] >= 1
        assert entry["key_groups_moved"] == 128  # half of the 256 key groups
    finally:
        allow(gates, lines=LINES, orders=ORDERS, payments=ORDERS)
    report = ended(run)
    assert any(r["scope"] == "global" for r in report["recoveries"])
    assert_exact(lab, out_dir)
