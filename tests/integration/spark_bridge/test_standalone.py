"""Standalone Spark: word count survives a SIGKILLed executor; stop() cleans up.

The session's shared ``local[2]`` SparkContext forbids a second one in this
process, so each driver runs in a subprocess against the cluster's master.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_bridge import final_state
from spark_bridge.standalone import StandaloneCluster
from tests.integration.conftest import start_standalone
from topology_api.topology import load_topology

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO_ROOT / "topologies" / "wordcount.py"
LINES = 960
ROWS_PER_BATCH = 160  # 6 micro-batches: the kill lands after the first

# Holds one executor until killed; the executor runs a job first so it is up.
IDLE_DRIVER = """
import sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.master(sys.argv[1]).appName("sr3-idle").getOrCreate()
spark.range(10).count()
print("READY", flush=True)
time.sleep(120)  # holds an executor until the test stops the cluster
"""


def _wait_for(
    predicate: Callable[[], object], *, timeout_s: float, what: str, log: Path
) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}:\n{tail}")
        time.sleep(0.1)  # the polling interval, bounded by timeout_s


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _driver_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _commits(checkpoint: Path) -> int:
    commits = checkpoint / "spark" / "commits"
    if not commits.is_dir():
        return 0
    return sum(1 for f in commits.iterdir() if f.name.isdigit())


def true_counts(lines: int) -> dict[str, dict[str, int]]:
    """Count the words of the example's corpus, keyed as state dump shows them."""
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    words = Counter(w for line in module.corpus(lines, 8, 7) for w in line.split())
    return {json.dumps([word]): {"n": n} for word, n in sorted(words.items())}


@pytest.mark.timeout(600)  # its deadlines below, not its usual 90-odd seconds
def test_wordcount_survives_a_killed_executor(
    standalone_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    cluster = standalone_cluster
    checkpoint = tmp_path / "ckpt"
    stderr_path = tmp_path / "driver.log"
    command = [
        sys.executable, "-m", "spark_bridge", str(WORDCOUNT),
        "--master", cluster.url, "--checkpoint-dir", str(checkpoint), "--state",
        "--conf", f"wordcount.lines={LINES}",
        "--max-rows-per-batch", str(ROWS_PER_BATCH),
    ]  # fmt: skip
    with stderr_path.open("wb") as stderr:
        driver = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=_driver_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        _wait_for(
            lambda: _commits(checkpoint) >= 1 or driver.poll() is not None,
            # a deadline, not a timing: the first batch starts a Python
            # worker and a JVM task on a shared 2-core machine (load 6 to 8
            # took over 90 s)
            timeout_s=240,
            what="the first committed micro-batch",
            log=stderr_path,
        )
        committed_at_kill = _commits(checkpoint)
        victims = cluster.executor_pids()
        assert victims, "no executor of this worker to kill"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        replacement = _wait_for(
            lambda: [p for p in cluster.executor_pids() if p not in victims],
            timeout_s=90,
            what="the worker to launch a new executor",
            log=cluster.log_path("worker"),
        )
        out, _ = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    log = stderr_path.read_text(encoding="utf-8", errors="replace")
    assert driver.returncode == 0, log[-3000:]
    assert not any(_alive(pid) for pid in victims)
    assert replacement
    # the kill landed mid-query: batches were still to come
    assert 1 <= committed_at_kill < _commits(checkpoint)
    report = json.loads(out)
    assert report["master"] == cluster.url
    # the lost executor held every stateful partition: Spark reloaded them from
    # its checkpoint files on the new one (no ring here, nothing else restored)
    loads = report["state_store"]
    assert loads["reloaded_partitions"] >= loads["partitions"] > 0, loads
    assert loads["batches"][0][1] == 0, loads
    # read from the sink here, independently of the report's layout
    assert final_state(checkpoint, "count") == true_counts(LINES)


def test_stop_leaves_no_master_worker_or_executor(tmp_path: Path) -> None:
    # its own cluster, not the session's: it stops it
    cluster = start_standalone(tmp_path / "cluster", cores=1, memory="1g")
    driver = subprocess.Popen(
        [sys.executable, "-c", IDLE_DRIVER, cluster.url],
        env=_driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().startswith(b"READY")
        executors = cluster.executor_pids()
        daemons = [cluster.master_pid, cluster.worker_pid]
        assert executors
        assert None not in daemons

        cluster.stop()
        cluster.stop()  # idempotent

        assert [pid for pid in [*daemons, *executors] if pid and _alive(pid)] == []
        assert cluster.master_pid is None
        assert cluster.worker_pid is None
        assert cluster.executor_pids() == []
    finally:
        cluster.stop()
        driver.kill()
        driver.wait()
