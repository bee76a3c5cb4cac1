"""The lab's metrics: ``sr3 lab up --metrics``, its scrape targets, the endpoints.

Ring nodes publish their Prometheus endpoint in their membership record
(:meth:`zk.membership.ZkMembership.metrics_urls`); topology runs write
``LAB/prometheus/targets/run-<topology>-<pid>.json`` while they run
(:mod:`storm_bridge.metrics`). The lab rewrites ``targets/nodes.json`` from
ZooKeeper when it starts nodes and whenever ``sr3 status`` looks, and the
Prometheus server (:mod:`sr3_cli.daemons.prometheus`) re-reads both.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sr3_cli import lab_kafka
from sr3_cli.cluster import open_cluster
from sr3_cli.daemons.prometheus import NODES_TARGETS, PrometheusServer, targets_dir
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.labfile import write_atomically

__all__ = [
    "endpoints",
    "lab_up",
    "prometheus_status",
    "refresh_node_targets",
    "start_prometheus",
    "stop_prometheus",
]

logger = logging.getLogger(__name__)

_NODE_JOB = "sr3-nodes"
_RUN_JOB = "sr3-runs"


def _server(lab: Lab) -> PrometheusServer | None:
    if lab.prometheus is None:
        return None
    return PrometheusServer.from_record(lab.root / "prometheus", lab.prometheus)


def start_prometheus(lab: Lab) -> PrometheusServer:
    """Start the lab's Prometheus server (unless it runs) and record it.

    Raises:
        PrometheusMissingError: Debian's package is not installed.
        SR3Error: it did not become ready.
    """
    with lab.locked():
        server = _server(lab) or PrometheusServer(lab.root / "prometheus")
        try:
            server.start()
        finally:
            lab.prometheus = server.record()
    return server


def stop_prometheus(lab: Lab) -> None:
    """Stop the lab's Prometheus server, if any (its data stays)."""
    with lab.locked():
        server = _server(lab)
        if server is not None:
            server.stop()
            lab.prometheus = None


def refresh_node_targets(lab: Lab, urls: Mapping[str, str]) -> None:
    """Rewrite ``targets/nodes.json`` with the ring nodes' endpoints ``urls``."""
    # no target labels: every series already carries its ``node`` label
    groups = [
        {"targets": [urlsplit(url).netloc]} for _node, url in sorted(urls.items())
    ]
    path = targets_dir(lab.root) / NODES_TARGETS
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(groups, indent=2))


def _run_endpoints(lab_root: Path) -> list[dict[str, str]]:
    found = []
    for path in sorted(targets_dir(lab_root).glob("run-*.json")):
        try:
            groups = json.loads(path.read_text(encoding="utf-8"))
            for group in groups:
                for target in group["targets"]:
                    found.append(
                        {
                            "job": _RUN_JOB,
                            "instance": target,
                            "url": f"http://{target}/metrics",
                        }
                    )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("run targets file %s is unreadable, skipped: %s", path, exc)
    return found


def endpoints(
    node_urls: Mapping[str, str], lab_root: Path | None
) -> list[dict[str, str]]:
    """Return every metrics endpoint as ``{"job", "instance", "url"}``."""
    found = [
        {"job": _NODE_JOB, "instance": urlsplit(url).netloc, "url": url}
        for _node, url in sorted(node_urls.items())
    ]
    if lab_root is not None:
        found += _run_endpoints(lab_root)
    return found


def prometheus_status(lab: Lab) -> dict[str, Any] | None:
    """Return the lab's Prometheus server for ``sr3 status --json``, or None."""
    server = _server(lab)
    if server is None:
        return None
    return {"url": server.url, "pid": server.pid, "running": server.running}


def lab_up(args: argparse.Namespace) -> int:
    """``sr3 lab up ... [--metrics]``: the lab, then its Prometheus server."""
    code = lab_kafka.lab_up(args)
    if code != 0 or not getattr(args, "metrics", False):
        return code
    # as every `sr3 lab` command: --dir, else $SR3_LAB, else ./lab
    lab = Lab.load(resolve_lab_dir(args.lab_dir) or Path("lab").resolve())
    server = start_prometheus(lab)
    with open_cluster(lab.config(), create=False) as cluster:
        refresh_node_targets(lab, cluster.membership.metrics_urls())
    print(
        f"Prometheus at {server.url}, scraping the ring nodes and every `sr3 run` "
        f"of this lab (config and data in {server.root})"
    )
    return 0
