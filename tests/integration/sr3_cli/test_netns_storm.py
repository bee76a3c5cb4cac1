"""Real Apache Storm across the netns lab's hosts, one supervisor host cut off.

One lab for the module (``sr3 lab up --netns --storm``): ZooKeeper and Nimbus
on h1, ring node node-i and supervisor-i on h(i+1), each host a namespace with
its own address. Word count runs on the real cluster through ``sr3 run
--engine apache-storm`` over both supervisors; while it runs, a host that
holds one of its worker JVMs (and a ring node) is cut off from every other
host for 10 s, then healed. The committed counts must be exactly those of a
failure-free run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
from storm_bridge.wiring import RingAccess

pytestmark = [
    pytest.mark.zk,
    pytest.mark.netns,
    pytest.mark.apache_storm,
    pytest.mark.slow,
]

WaitUntil = Callable[..., Any]
REPO = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
#: Long enough that the run is still going when the cut ends.
LINES = 20000
PARTITION_S = 10.0
WORKER_MAIN = "org.apache.storm.daemon.worker.Worker"


def sr3(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` from the root namespace; check it printed no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    venv_bin = str(Path(sys.executable).parent)
    environ["PATH"] = f"{venv_bin}{os.pathsep}{environ.get('PATH', '')}"
    return environ


@pytest.fixture(scope="module")
def storm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """h1: ZooKeeper, Nimbus; h2..h4: node-1..3; supervisor-1, -2 on h2, h3."""
    root = tmp_path_factory.mktemp("netstorm") / "lab"
    try:
        sr3(
            "lab", "up", "--netns", "--hosts", "4", "--nodes", "3", "--storm",
            "--supervisors", "2", "--nimbus-port", "0", "--dir", str(root),
        )  # fmt: skip
        yield Lab.load(root)
    finally:
        sr3("lab", "down", "--dir", str(root), check=False)
        assert netns.namespaces(prefix_for(root)) == []


def expected_counts() -> dict[str, int]:
    sys.path.insert(0, str(WORDCOUNT.parent))
    try:
        import wordcount  # type: ignore[import-not-found]  # noqa: PLC0415
    finally:
        sys.path.remove(str(WORDCOUNT.parent))
    words = (w for line in wordcount.corpus(LINES, 8, 7) for w in line.split())
    return dict(Counter(words))


def host_with_a_worker(lab: Lab) -> str | None:
    """A supervisor host (h2 or h3) running a worker JVM of the topology."""
    for host in ("h2", "h3"):
        for pid in netns.pids(f"{prefix_for(lab.root)}-{host}"):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if WORKER_MAIN.encode() in argv:
                return host
    return None


def test_storm_daemons_run_on_their_hosts(storm_lab: Lab) -> None:
    status = json.loads(sr3("status", "--json", "--lab", str(storm_lab.root)).stdout)
    roles = {h["host"]: h["roles"] for h in status["hosts"]}
    assert roles == {
        "h1": ["zookeeper", "nimbus"],
        "h2": ["node-1", "supervisor-1"],
        "h3": ["node-2", "supervisor-2"],
        "h4": ["node-3"],
    }
    address = {h["host"]: h["address"] for h in status["hosts"]}
    assert storm_lab.storm is not None
    assert storm_lab.storm["nimbus"].split(":")[0] == address["h1"]


def test_every_storm_daemon_runs_as_the_vagrant_provisioning_script_starts_it(
    storm_lab: Lab,
) -> None:
    # vagrant/provision/storm.sh runs for real here: Nimbus and each supervisor
    # JVM were exec'd by the wrapper the script wrote, as systemd runs them on a
    # VM, from the lab's storm.yaml
    cluster = json.loads((storm_lab.root / "storm" / "cluster.json").read_text())
    daemons = {"nimbus": cluster["nimbus_pid"]}
    daemons |= {f"supervisor-{s['index']}": s["pid"] for s in cluster["supervisors"]}
    assert len(daemons) == 3
    for name, pid in daemons.items():
        wrapper = storm_lab.root / "storm" / "provision" / name / "etc" / "run"
        text = (wrapper / f"storm-{name}").read_text(encoding="utf-8")
        assert "written by vagrant/provision" in text, name
        assert f"-Dlogfile.name={name}.log" in text
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        # the wrapper marks what it starts; the JVM's own argv is the lab's
        assert f"SR3_SERVICE=storm-{name}".encode() in environ, name
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        conf = f"-Dstorm.conf.file={storm_lab.root / 'storm'}".encode()
        assert any(arg.startswith(conf) for arg in cmdline), name


@pytest.mark.soak  # 3 min; the netns ring-node partition tests stay in make test
def test_exactly_once_across_a_partition_of_a_supervisor_host(
    storm_lab: Lab, wait_until: WaitUntil
) -> None:
    lab = storm_lab
    ring = RingAccess(lab.config(Sr3Config()))
    conf = {
        "wordcount.lines": LINES,
        "topology.workers": 2,  # one worker per supervisor host
        "topology.message.timeout.secs": 5,
        "sr3.checkpoint.interval.s": 0.5,
        # the default 1 s quiet time: tuples held on the cut host arrive when it
        # heals, up to PARTITION_S late, and are dropped by the generation in
        # their hidden field (before it, a CI run counted 171964 words of 160000)
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "sr3_cli", "run", str(WORDCOUNT), "--engine",
         "apache-storm", "--lab", str(lab.root), "--until-idle", "--json",
         "--timeout", "400",
         *(arg for k, v in conf.items() for arg in ("-o", f"{k}={v}"))],
        cwd=REPO, env=_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: ring.committed("wordcount") is not None or run.poll() is not None,
            timeout_s=240,
            what="the run's first committed epoch",
        )
        host = wait_until(
            lambda: host_with_a_worker(lab), timeout_s=60, what="a worker JVM"
        )
        sr3("lab", "partition", host, "--dir", str(lab.root))
        time.sleep(PARTITION_S)  # the cut's length, not a readiness wait
        sr3("lab", "heal", "--dir", str(lab.root))
        assert run.poll() is None  # the cut fell inside the run
        out, err = run.communicate(timeout=420)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        sr3("lab", "heal", "--dir", str(lab.root), check=False)
    assert run.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["idle"] is True
    _epoch, state = ring.committed_state("wordcount", "count")
    ring.close()
    counts = {str(key[0]): int(value["n"]) for key, value in state.items()}
    seen = {k: report[k] for k in ("checkpoints", "recoveries", "counters", "errors")}
    assert sum(counts.values()) == sum(expected_counts().values()), (seen, err[-4000:])
    assert counts == expected_counts()
