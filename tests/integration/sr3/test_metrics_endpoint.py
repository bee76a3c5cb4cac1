"""A metrics endpoint over HTTP: what a scrape gets, and a port already taken."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sr3 import metrics_serving
from sr3.config_engine import MetricsConfig
from sr3.errors import ConfigError
from sr3.metrics import NodeMetrics, RunMetrics
from sr3.metrics_serving import SCRAPED_MARKER, RunPublisher, serve


def test_an_endpoint_serves_its_registry_until_closed() -> None:
    metrics = NodeMetrics(
        "n1", shards=lambda: 5, stored_bytes=lambda: 10, is_leader=lambda: False
    )
    endpoint = serve(metrics.registry)
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:  # noqa: S310
            text = response.read().decode()
    finally:
        endpoint.close()
    assert 'sr3_node_shards{node="n1"} 5.0' in text
    assert 'sr3_repair_leader{node="n1"} 0.0' in text


def test_a_taken_metrics_port_is_refused_naming_the_key() -> None:
    taken = serve(CollectorRegistry())
    try:
        with pytest.raises(ConfigError, match=r"sr3\.metrics\.port"):
            serve(CollectorRegistry(), port=taken.port)
    finally:
        taken.close()


def _closing(publisher: RunPublisher) -> threading.Thread:
    thread = threading.Thread(target=publisher.close)
    thread.start()
    return thread


@pytest.mark.parametrize("prometheus", [False, True])
def test_a_run_waits_for_its_final_scrape_only_where_a_prometheus_reads_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prometheus: bool
) -> None:
    # a lab without Prometheus: nobody scrapes, the run's end must not wait
    # (every run in such a lab waited 3 s); with one, the final values are read
    monkeypatch.setattr(metrics_serving, "FINAL_SCRAPE_S", 600.0)
    if prometheus:
        (tmp_path / SCRAPED_MARKER).touch()
    metrics = RunMetrics("wc")
    publisher = RunPublisher(metrics, MetricsConfig(), tmp_path, lambda: None, "t")
    endpoint = publisher.start()
    assert endpoint is not None
    assert list(tmp_path.glob("run-wc-*.json"))  # listed for `sr3 status`
    closing = _closing(publisher)
    try:
        # Prometheus scrapes every second: until the close saw one after it began
        while prometheus and closing.is_alive():
            try:
                with urllib.request.urlopen(endpoint.url, timeout=5) as response:  # noqa: S310 (our loopback endpoint)
                    assert b"sr3_" in response.read()
            except (urllib.error.URLError, ConnectionError):
                break  # it served the scrape it waited for, and closed
            closing.join(0.2)
    finally:
        closing.join(60)
    assert not closing.is_alive(), "the run's end waited for a scrape"
    assert not list(tmp_path.glob("run-wc-*.json"))
