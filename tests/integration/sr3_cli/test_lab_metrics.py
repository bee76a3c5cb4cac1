"""``sr3 lab up --metrics``: a real Prometheus server scrapes every ``sr3_*`` metric.

One lab (``sr3 lab up --metrics``: ZooKeeper, three ring nodes and Debian's
Prometheus) and one word count run in it, both through the command line; the
cases then read what a user would: ``sr3 status --json``, Prometheus's HTTP API
and a node's endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sr3.metrics import METRICS
from tests.conftest import REPO_ROOT, WaitUntil, _wait_until

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

DOC = REPO_ROOT / "docs" / "metrics.md"


def sr3(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS``; check it succeeded without a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=timeout_s,
        check=False,
        cwd=REPO_ROOT,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    return proc


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
        return str(response.read().decode())


@dataclass
class MetricsLab:
    """The lab, its Prometheus URL and the run's ``sr3 status`` seen mid-run."""

    root: Path
    prometheus: str
    status_during_run: dict[str, Any]

    def status(self) -> dict[str, Any]:
        out = sr3("status", "--json", "--lab", str(self.root)).stdout
        return dict(json.loads(out))

    def scraped_names(self) -> set[str]:
        body = json.loads(_get(f"{self.prometheus}/api/v1/label/__name__/values"))
        return set(body["data"])

    def query(self, promql: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql})
        body = json.loads(_get(f"{self.prometheus}/api/v1/query?{q}"))
        return list(body["data"]["result"])


class Missing:
    """The metrics not scraped yet; its text is what a timed-out wait names."""

    def __init__(self, wanted: set[str]) -> None:
        self.names = set(wanted)

    def update(self, scraped: set[str]) -> bool:
        """Forget the scraped names; whether none is missing any more."""
        self.names -= scraped
        return not self.names

    def __str__(self) -> str:
        return f"Prometheus to scrape {sorted(self.names)} (still missing)"


@pytest.fixture(scope="module")
def metrics_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsLab]:
    """A lab up with --metrics, after a word count run in it (a task killed)."""
    assert shutil.which("prometheus"), (
        "Debian's prometheus package is missing: run scripts/bootstrap.sh"
    )
    root = tmp_path_factory.mktemp("metrics") / "lab"
    sr3("lab", "up", "--dir", str(root), "--nodes", "3", "--metrics")
    try:
        state = json.loads((root / "lab.json").read_text())
        lab = MetricsLab(root, state["prometheus"]["url"], {})
        run = subprocess.Popen(
            [sys.executable, "-m", "sr3_cli", "run", "topologies/wordcount.py",
             "--until-idle", "-o", "sr3.idle.quiet.s=0.5",
             # epochs every 0.2 s: the task dies with a committed epoch to restore
             "-o", "sr3.checkpoint.interval.s=0.2", "--kill", "count:0@2",
             "--lab", str(root), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_environ(),
            cwd=REPO_ROOT,
        )  # fmt: skip
        try:
            # one `sr3 status` once the run listed itself (polling the command
            # would slow the run down)
            _wait_until(
                lambda: list((root / "prometheus" / "targets").glob("run-*.json")),
                timeout_s=30,
                what="the run listing its endpoint",
            )
            lab.status_during_run = lab.status()
        finally:
            _out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()
        yield lab
    finally:
        sr3("lab", "down", "--dir", str(root))


def test_prometheus_scrapes_every_metric_in_docs_metrics_md(
    metrics_lab: MetricsLab, wait_until: WaitUntil
) -> None:
    listed = {s.name for s in METRICS if f"`{s.name}`" in DOC.read_text()}
    assert listed == {s.name for s in METRICS}
    wanted = {name for spec in METRICS for name in spec.scraped_names}
    missing = Missing(wanted)
    wait_until(
        lambda: missing.update(metrics_lab.scraped_names()),
        timeout_s=20,
        what=missing,
    )
    # the run's tuples were counted per component while it ran
    counted = metrics_lab.query(
        'max_over_time(sr3_tuples_total{component="count"}[10m])'
    )
    assert counted and float(counted[0]["value"][1]) > 0
    # the killed task's rollback was counted under the mechanism it restored by
    promql = 'max_over_time(sr3_recoveries_total{scope="global"}[10m]) > 0'
    recovered = wait_until(
        lambda: metrics_lab.query(promql), timeout_s=10, what="a recovery counted"
    )
    assert {r["metric"]["mechanism"] for r in recovered} <= {"star", "line", "tree"}


def test_status_json_lists_every_nodes_and_the_runs_endpoint(
    metrics_lab: MetricsLab,
) -> None:
    during = metrics_lab.status_during_run
    jobs = sorted(m["job"] for m in during["metrics"])
    assert jobs == ["sr3-nodes"] * 3 + ["sr3-runs"]
    for endpoint in during["metrics"]:
        assert endpoint["url"] == f"http://{endpoint['instance']}/metrics"
    after = metrics_lab.status()
    assert [m["job"] for m in after["metrics"]] == ["sr3-nodes"] * 3  # run ended
    assert after["prometheus"]["running"] is True
    assert after["prometheus"]["url"] == metrics_lab.prometheus


def test_a_nodes_endpoint_serves_the_shard_count_it_stores(
    metrics_lab: MetricsLab, wait_until: WaitUntil
) -> None:
    during = metrics_lab.status_during_run["metrics"]
    urls = sorted(m["url"] for m in during if m["job"] == "sr3-nodes")

    def agree() -> bool:
        for url in urls:
            shards = {
                sample.labels["node"]: sample.value
                for family in text_string_to_metric_families(_get(url))
                for sample in family.samples
                if sample.name == "sr3_node_shards"
            }
            ((node, served),) = shards.items()
            stored = len(
                list((metrics_lab.root / "nodes" / node / "replicas").iterdir())
            )
            if stored == 0 or served != stored:
                return False
        return True

    wait_until(agree, timeout_s=10, what="each node's sr3_node_shards = its replicas")


def test_prometheus_scrapes_a_restarted_node_on_its_new_port(
    metrics_lab: MetricsLab, wait_until: WaitUntil
) -> None:
    state = metrics_lab.root / "lab.json"
    os.kill(json.loads(state.read_text())["nodes"]["node-2"]["pid"], signal.SIGKILL)
    sr3("lab", "restart", "node-2", "--dir", str(metrics_lab.root))
    # no `sr3 status` in between: the restart itself rewrote the targets
    node = json.loads(state.read_text())["nodes"]["node-2"]

    def node_2_up() -> bool:
        body = json.loads(_get(f"{metrics_lab.prometheus}/api/v1/query?query=up"))
        up = {r["metric"]["instance"]: r["value"][1] for r in body["data"]["result"]}
        shards = metrics_lab.query('sr3_node_shards{node="node-2"}')
        return bool(shards) and up.get(shards[0]["metric"]["instance"]) == "1"

    assert node["pid"]  # running again
    wait_until(node_2_up, timeout_s=15, what="Prometheus scraping node-2 again")
