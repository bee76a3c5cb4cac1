"""A metrics endpoint over HTTP: what a scrape gets, and a port already taken."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from sr3.errors import ConfigError
from sr3.metrics import NodeMetrics
from sr3.metrics_serving import serve


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
