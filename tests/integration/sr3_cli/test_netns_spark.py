"""Spark standalone and Kafka on the netns lab's hosts.

One lab for the module (``sr3 lab up --netns --hosts 4 --spark --kafka``):
ZooKeeper, the Spark master and the Kafka broker on h1; ring node node-i on
h(i+1); Spark's two workers on h2 and h3, each bound to its host's address.
Word count runs through ``sr3 run --engine spark`` against that master: the
driver stays in the root namespace and binds the bridge's address, the
executors run on h2 and h3. A Kafka topic is written from h2 and read from h3
through the broker on h1. Last, h2 (a Spark worker, its executor and node-1)
is SIGKILLed mid-run, and the counts must still be exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config
from sr3_cli import netns
from sr3_cli.lab import Lab
from sr3_cli.lab_netns import prefix_for
from sr3_cli.processes import lab_processes
from storm_bridge.wiring import RingAccess

pytestmark = [pytest.mark.zk, pytest.mark.netns, pytest.mark.spark, pytest.mark.slow]

WaitUntil = Callable[..., Any]
REPO = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
EXECUTOR_MAIN = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def sr3(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` from the root namespace; check it printed no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=600,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    environ.pop("SPARK_LOCAL_IP", None)  # `sr3 run` must find the driver's address
    venv_bin = str(Path(sys.executable).parent)
    environ["PATH"] = f"{venv_bin}{os.pathsep}{environ.get('PATH', '')}"
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return environ


@pytest.fixture(scope="module")
def spark_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """h1: ZooKeeper, Spark master, Kafka; h2..h4: node-1..3; workers on h2, h3."""
    root = tmp_path_factory.mktemp("netspark") / "lab"
    try:
        sr3(
            "lab", "up", "--netns", "--hosts", "4", "--nodes", "3", "--spark",
            "--kafka", "--dir", str(root),
        )  # fmt: skip
        yield Lab.load(root)
    finally:
        sr3("lab", "down", "--dir", str(root), check=False)
        assert netns.namespaces(prefix_for(root)) == []
        assert lab_processes(root) == []


def _ns(lab: Lab, host: str) -> str:
    return f"{prefix_for(lab.root)}-{host}"


def expected_counts(lines: int) -> dict[str, int]:
    sys.path.insert(0, str(WORDCOUNT.parent))
    try:
        import wordcount  # type: ignore[import-not-found]  # noqa: PLC0415
    finally:
        sys.path.remove(str(WORDCOUNT.parent))
    words = (w for line in wordcount.corpus(lines, 8, 7) for w in line.split())
    return dict(Counter(words))


def committed_counts(lab: Lab) -> dict[str, int]:
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        _epoch, state = ring.committed_state("wordcount", "count")
    finally:
        ring.close()
    return {str(key[0]): int(value["n"]) for key, value in state.items()}


def spark_run(lab: Lab, checkpoint: Path, lines: int) -> subprocess.Popen[str]:
    """Start word count on the lab's Spark master (the driver: this namespace)."""
    assert lab.spark is not None
    return subprocess.Popen(
        [sys.executable, "-m", "sr3_cli", "run", str(WORDCOUNT), "--engine",
         "spark", "--master", lab.spark["master"], "--lab", str(lab.root),
         "--checkpoint-dir", str(checkpoint), "--until-idle", "--json",
         "--max-rows-per-batch", "500", "-o", f"wordcount.lines={lines}"],
        cwd=REPO, env=_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def executor_hosts(lab: Lab) -> set[str]:
    """The hosts (h2, h3) where an executor JVM runs now."""
    found = set()
    for host in ("h2", "h3"):
        for pid in netns.pids(_ns(lab, host)):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if EXECUTOR_MAIN in argv:
                found.add(host)
    return found


def test_spark_and_kafka_run_on_their_hosts(spark_lab: Lab) -> None:
    status = json.loads(sr3("status", "--json", "--lab", str(spark_lab.root)).stdout)
    roles = {h["host"]: h["roles"] for h in status["hosts"]}
    assert roles == {
        "h1": ["zookeeper", "kafka", "spark-master"],
        "h2": ["node-1", "spark-worker-1"],
        "h3": ["node-2", "spark-worker-2"],
        "h4": ["node-3"],
    }
    address = {h["host"]: h["address"] for h in status["hosts"]}
    spark = status["spark"]
    assert (
        spark["master"] == f"spark://{address['h1']}:{spark['master'].split(':')[-1]}"
    )
    assert spark["master_pid"] in netns.pids(_ns(spark_lab, "h1"))
    assert [(w["name"], w["host"]) for w in spark["workers"]] == [
        ("spark-worker-1", address["h2"]),
        ("spark-worker-2", address["h3"]),
    ]
    for worker, host in zip(spark["workers"], ("h2", "h3"), strict=True):
        assert worker["pid"] in netns.pids(_ns(spark_lab, host))
    gateway = str(spark_lab.netns["gateway"]) if spark_lab.netns else None
    assert spark["driver_host"] == gateway
    kafka = status["kafka"]
    assert kafka["running"] is True
    assert kafka["bootstrap"].split(":")[0] == address["h1"]
    assert kafka["pid"] in netns.pids(_ns(spark_lab, "h1"))


def test_every_spark_daemon_runs_as_the_vagrant_provisioning_script_starts_it(
    spark_lab: Lab,
) -> None:
    # vagrant/provision/spark.sh runs for real here: each daemon JVM was exec'd
    # by the wrapper the script wrote, as systemd runs it on a VM
    status = json.loads(sr3("status", "--json", "--lab", str(spark_lab.root)).stdout)
    spark = status["spark"]
    daemons = {
        "spark-master": (spark["master_pid"], spark["master"].split(":")[-1]),
        **{w["name"]: (w["pid"], None) for w in spark["workers"]},
    }
    for name, (pid, port) in daemons.items():
        wrapper = spark_lab.root / "spark" / "provision" / name / "etc" / "run" / name
        text = wrapper.read_text(encoding="utf-8")
        assert "written by vagrant/provision" in text, name
        if port is not None:
            assert f"--port {port}" in text
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        # only the wrapper marks what it starts and sets spark.sh's log dir
        assert f"SR3_SERVICE={name}".encode() in environ, name
        log_dir = f"SPARK_LOG_DIR={spark_lab.root / 'spark' / 'provision' / name}"
        assert any(v.startswith(log_dir.encode()) for v in environ), name


PRODUCE = """
import sys
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1]})
for i in range(int(sys.argv[3])):
    producer.produce(sys.argv[2], key=str(i).encode(), value=f"line {i}".encode())
assert producer.flush(60) == 0, "messages left undelivered"
"""
CONSUME = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "netns",
                     "auto.offset.reset": "earliest"})
consumer.subscribe([sys.argv[2]])
got = []
for _ in range(600):
    if len(got) >= int(sys.argv[3]):
        break
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        got.append(msg.value().decode())
consumer.close()
print("\\n".join(got))
"""


def test_a_kafka_topic_written_on_one_host_is_read_on_another(spark_lab: Lab) -> None:
    assert spark_lab.kafka is not None
    bootstrap = str(spark_lab.kafka["bootstrap"])
    sr3(
        "lab", "topic", "netns-lines", "--partitions", "1", "--dir", str(spark_lab.root)
    )
    count = "500"
    for host, script in (("h2", PRODUCE), ("h3", CONSUME)):
        proc = subprocess.run(
            [*netns.exec_prefix(_ns(spark_lab, host)), sys.executable, "-c",
             textwrap.dedent(script), bootstrap, "netns-lines", count],
            capture_output=True, text=True, env=_environ(), timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (host, proc.stderr[-3000:])
    assert proc.stdout.splitlines() == [f"line {i}" for i in range(int(count))]


def test_spark_word_count_is_exact_when_a_worker_host_dies_mid_run(
    spark_lab: Lab, tmp_path: Path, wait_until: WaitUntil
) -> None:
    """Executors run on both worker hosts; h2 then dies and the counts stay exact.

    Last in the module: h2 (spark-worker-1, its executor, node-1) stays dead.
    """
    lines = 8000
    ring = RingAccess(spark_lab.config(Sr3Config()))
    started = time.time()  # tells this run's commits from the previous test's

    def committed_by_this_run() -> bool:
        record = ring.committed("wordcount")
        return (
            record is not None and bool(record.owners) and record.committed_at > started
        )

    run = spark_run(spark_lab, tmp_path / "checkpoint", lines)
    try:
        wait_until(
            lambda: committed_by_this_run() or run.poll() is not None,
            timeout_s=300,
            what="the run's first committed epoch",
        )
        if run.poll() is not None:
            _out, err = run.communicate()
            pytest.fail(f"the run ended before h2 could be failed: {err[-4000:]}")
        # the driver in this namespace, an executor on each worker host
        wait_until(
            lambda: executor_hosts(spark_lab) == {"h2", "h3"} or run.poll() is not None,
            timeout_s=120,
            what="executors on both Spark worker hosts",
        )
        on_hosts = executor_hosts(spark_lab)
        killed = sr3("lab", "fail", "h2", "--dir", str(spark_lab.root)).stdout
        out, err = run.communicate(timeout=900)
    finally:
        ring.close()
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err[-4000:]
    assert on_hosts == {"h2", "h3"}, err[-4000:]
    assert "killed" in killed
    report = json.loads(out)
    assert report["idle"] is True
    assert report["master"] == spark_lab.spark["master"] if spark_lab.spark else False
    assert committed_counts(spark_lab) == expected_counts(lines), err[-3000:]
    # the run started empty: no restore read the ring, before or after h2 died;
    # Spark reloaded the moved partitions' state from its own checkpoint files
    assert report["recoveries"] == [], report["recoveries"]
    loads = report["state_store"]
    assert 1 <= loads["reloaded_partitions"], loads
