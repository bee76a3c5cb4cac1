"""The lab's scrape targets: what Prometheus reads and ``sr3 status`` lists agree."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import MagicMock

import pytest

import sr3_cli.commands  # noqa: F401 - first: sr3_cli's modules import each other
from sr3.metrics_serving import Endpoint, write_target
from sr3_cli.daemons import prometheus
from sr3_cli.daemons.prometheus import PrometheusServer, targets_dir
from sr3_cli.lab import Lab
from sr3_cli.lab_metrics import endpoints, refresh_node_targets


def _endpoint(port: int) -> Endpoint:
    return Endpoint(f"http://127.0.0.1:{port}/metrics", MagicMock(), MagicMock())


def test_nodes_and_runs_are_listed_for_prometheus_and_for_status(
    tmp_path: Path,
) -> None:
    lab = Lab(root=tmp_path)
    urls = {
        "node-2": "http://127.0.0.1:9102/metrics",
        "node-1": "http://127.0.0.1:9101/metrics",
    }
    refresh_node_targets(lab, urls)
    run_file = write_target(targets_dir(tmp_path), "wordcount", _endpoint(9200))
    nodes = json.loads((targets_dir(tmp_path) / "nodes.json").read_text())
    assert nodes == [{"targets": ["127.0.0.1:9101"]}, {"targets": ["127.0.0.1:9102"]}]
    assert json.loads(run_file.read_text()) == [{"targets": ["127.0.0.1:9200"]}]
    assert endpoints(urls, tmp_path) == [
        {"job": "sr3-nodes", "instance": "127.0.0.1:9101", "url": urls["node-1"]},
        {"job": "sr3-nodes", "instance": "127.0.0.1:9102", "url": urls["node-2"]},
        {
            "job": "sr3-runs",
            "instance": "127.0.0.1:9200",
            "url": "http://127.0.0.1:9200/metrics",
        },
    ]
    run_file.unlink()  # a run removes its file when it ends
    assert [e["job"] for e in endpoints(urls, tmp_path)] == ["sr3-nodes"] * 2


def test_prometheus_scrapes_both_target_files_of_its_lab(tmp_path: Path) -> None:
    config = prometheus._config(tmp_path / "prometheus")
    targets = targets_dir(tmp_path)
    assert f"files: ['{targets / 'nodes.json'}']" in config
    assert f"files: ['{targets / 'run-*.json'}']" in config


def test_lab_up_metrics_without_prometheus_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus.shutil, "which", lambda _name: None)
    with pytest.raises(
        prometheus.PrometheusMissingError, match="apt-get install -y prometheus"
    ):
        PrometheusServer(tmp_path / "prometheus").start()
