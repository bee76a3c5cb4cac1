"""Stragglers of a rolled-back tree are dropped by their generation on real Storm.

Word count runs on the session's Apache Storm cluster in native checkpoint mode
with the default 1 s rollback quiet time, started by ``sr3 run`` and by
streamparse's own ``sparse submit`` (config.json's ``lab`` env, through the
project's ``pre_submit`` hook, :mod:`storm_bridge.sparse.hook`). One splitter
task's Python process is SIGSTOPped: the lines buffered in its pipe belong to
trees that time out, the topology rolls back, every counter restores, the quiet
time passes (the stopped splitter sends nothing) and the spouts resume in a
newer generation. Only then is the splitter SIGCONTed: its words of the
rolled-back trees reach the counters after the quiet time, and only the hidden
generation field (:mod:`storm_bridge.generation_field`) tells them apart. The
committed counts must be exact. Nothing here skips.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.apache import ApacheStormCluster
from storm_bridge.sparse.submit import NimbusSession
from storm_bridge.sparse.workers import TaskProcess, task_processes
from storm_bridge.wiring import RingAccess
from tests.integration.apache_storm.test_sparse_submit import (
    REPO,
    WORDCOUNT,
    _env,
    committed_counts,
    expected_counts,
    sparse,
)
from tests.integration.conftest import WaitUntil, running_lab
from zk.epoch_control import Phase
from zk.epochs import ZkEpochStore

pytestmark = [pytest.mark.zk, pytest.mark.apache_storm, pytest.mark.slow]

#: Enough lines that the run still emits when the splitter stops (~10 s of work).
LINES = 12000
CONF = {
    "wordcount.lines": LINES,
    "topology.message.timeout.secs": 5,
    "sr3.checkpoint.interval.s": 0.5,
    "sr3.checkpoint.rollback.quiet.s": 1,
    # a stopped subprocess answers no heartbeat: Storm must not kill it meanwhile
    "topology.subprocess.timeout.secs": 300,
}
_TIMEOUT_S = 400


@pytest.fixture(scope="module")
def ring_lab(
    tmp_path_factory: pytest.TempPathFactory, zk_server: object
) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("storm-genfield") / "lab") as lab:
        yield lab


def _split_task(nimbus: str, name: str = "wordcount") -> TaskProcess | None:
    topology = NimbusSession(nimbus).topologies().get(name)
    if topology is None:
        return None
    tasks = task_processes(topology.topology_id).get("split")
    return tasks[0] if tasks else None


@pytest.mark.soak  # the sparse submit test below fences stragglers in make test
def test_stragglers_arriving_after_the_quiet_time_are_dropped_by_generation(
    apache_storm: ApacheStormCluster, ring_lab: Lab, wait_until: WaitUntil
) -> None:
    ring = RingAccess(ring_lab.config(Sr3Config()))
    store = ZkEpochStore(ring.session, "wordcount")
    run = subprocess.Popen(  # noqa: S603 (sr3 run, our arguments)
        [sys.executable, "-m", "sr3_cli", "run", str(WORDCOUNT), "--engine",
         "apache-storm", "--nimbus", apache_storm.nimbus, "--lab", str(ring_lab.root),
         "--until-idle", "--json", "--timeout", str(_TIMEOUT_S),
         *(arg for k, v in CONF.items() for arg in ("-o", f"{k}={v}"))],
        cwd=REPO, env=_env(apache_storm.nimbus), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: ring.committed("wordcount") is not None or run.poll() is not None,
            timeout_s=240,
            what="the run's first committed epoch",
        )
        assert run.poll() is None, run.communicate()[1][-3000:]
        _stop_split_until_resumed(store, apache_storm.nimbus, "wordcount", wait_until)
        out, err = run.communicate(timeout=_TIMEOUT_S + 60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out)
    assert report["idle"] is True
    counts = committed_counts(ring, "wordcount")
    ring.close()
    assert counts is not None
    assert sum(counts.values()) == sum(expected_counts(LINES).values()), (
        report["recoveries"],
        err[-3000:],
    )
    assert counts == expected_counts(LINES)


def _stop_split_until_resumed(
    store: ZkEpochStore, nimbus: str, name: str, wait_until: WaitUntil
) -> None:
    """SIGSTOP a split task until a rollback resumed in a newer generation."""
    split = wait_until(
        lambda: _split_task(nimbus, name),
        timeout_s=60,
        what="a split task's Python process",
    )
    before = store.generation()
    os.kill(split.pid, signal.SIGSTOP)
    try:

        def resumed_newer() -> bool:
            control = store.control()
            return (
                control is not None
                and control.generation > before
                and control.phase is Phase.RUNNING
            )

        # RUNNING of a newer generation: every owner restored and the
        # quiet time passed while the splitter held its stragglers
        wait_until(resumed_newer, timeout_s=180, what="the rollback to resume")
    finally:
        os.kill(split.pid, signal.SIGCONT)


def test_sparse_submit_drops_stragglers_by_generation(
    apache_storm: ApacheStormCluster,
    ring_lab: Lab,
    topology_jar: Path,
    wait_until: WaitUntil,
) -> None:
    # five characters: `sparse list` wraps longer names over several table rows
    name = f"g{uuid.uuid4().hex[:4]}"
    nimbus = apache_storm.nimbus
    config = ring_lab.config(Sr3Config())
    conf = {
        **CONF,
        "sr3.zk.hosts": config.zk.hosts,
        "sr3.zk.chroot": config.zk.chroot,
        "sr3.node.secret": config.node.secret,
    }
    ring = RingAccess(config)
    store = ZkEpochStore(ring.session, name)
    options = [arg for k, v in conf.items() for arg in ("-o", f"{k}={v}")]
    submitted = sparse(
        ["submit", "-e", "lab", "-n", "wordcount", "-N", name, "-j",
         str(topology_jar), *options],
        nimbus,
    )  # fmt: skip
    try:
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "generation field on count, lines, split" in submitted.stdout
        wait_until(
            lambda: ring.committed(name) is not None,
            timeout_s=240,
            what=f"{name}'s first committed epoch",
        )
        _stop_split_until_resumed(store, nimbus, name, wait_until)

        def drained() -> bool:
            # both spout tasks' last lines are in a committed epoch: every
            # tree before them was drained into it (or rolled back)
            record = ring.committed(name)
            return record is not None and sorted(
                v for v in record.offsets.values() if v is not None
            ) == [LINES - 2, LINES - 1]

        wait_until(drained, timeout_s=_TIMEOUT_S, what=f"{name}'s last lines")
        counts = committed_counts(ring, name)
    finally:
        killed = sparse(["kill", "-e", "lab", "-n", name, "--wait", "0"], nimbus)
        ring.close()
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert counts is not None
    expected = expected_counts(LINES)
    assert sum(counts.values()) == sum(expected.values())
    assert counts == expected
    wait_until(
        lambda: name not in NimbusSession(nimbus).topologies(),
        timeout_s=60,
        what=f"{name} gone from Nimbus",
    )
