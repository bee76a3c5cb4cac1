"""A topology run's Prometheus endpoint on the local cluster (``sr3 run``).

:class:`RunMetricsFeed` serves a :class:`sr3.metrics.RunMetrics` and copies into it
what the cluster already counts, every :data:`FEED_INTERVAL_S`: tuples per
component, tuples waiting at each component (backpressure), committed and
abandoned epochs with their durations and snapshot bytes, and every finished
recovery with its mechanism. In a lab it writes its file_sd target to
``LAB/prometheus/targets/run-<topology>-<pid>.json`` and removes it at the end.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from backend.lazy import LAZY_FETCH
from sr3.config import Sr3Config
from sr3.metrics import RunMetrics
from sr3.metrics_serving import FEED_INTERVAL_S, RunPublisher
from storm_bridge.cluster import LocalCluster
from storm_bridge.cluster.checkpoints import Coordinator

__all__ = ["FEED_INTERVAL_S", "RunMetricsFeed"]

logger = logging.getLogger(__name__)


class RunMetricsFeed:
    """Serves a run's metrics, fed from its :class:`LocalCluster`.

    Args:
        cluster: The running cluster.
        topology: The topology's name.
        config: ``sr3.metrics.*`` decide whether and where it serves.
        targets_dir: The lab's targets dir (None: no lab, nothing written).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        topology: str,
        config: Sr3Config,
        targets_dir: Path | None,
    ) -> None:
        self._cluster = cluster
        self.metrics = RunMetrics(topology)
        self._publisher = RunPublisher(
            self.metrics, config.metrics, targets_dir, self.feed, "sr3-run-metrics"
        )
        self._epochs = 0
        self._abandoned = 0
        self._recoveries = 0

    def start(self) -> None:
        """Serve (when ``sr3.metrics.enabled``) and start feeding."""
        endpoint = self._publisher.start()
        if endpoint is not None:
            logger.info("run metrics at %s", endpoint.url)

    def close(self) -> None:
        """Feed once more, stop serving, remove the target."""
        self._publisher.close()

    def feed(self) -> None:
        """Copy the cluster's counts into the metrics (quick; never raises)."""
        try:
            counters = self._cluster.counters()
            self.metrics.tuples(
                {n: max(c.emitted, c.acked) for n, c in counters.items()},
                {n: c.failed for n, c in counters.items()},
            )
            for name, pending in self._cluster.pending_tuples().items():
                self.metrics.pending(name, pending)
            self._cluster.with_coordinator(self._feed_checkpoints)
        except Exception:  # a metrics bug must not end the run
            logger.exception("run metrics feed failed")

    def _feed_checkpoints(self, coordinator: Coordinator) -> None:
        for stats in coordinator.committed[self._epochs :]:
            size = sum(_bytes(r) for r in stats.reports.values())
            self.metrics.checkpoint(seconds=stats.duration_s, size_bytes=size)
        self._epochs = len(coordinator.committed)
        if coordinator.abandoned > self._abandoned:
            self.metrics.checkpoint_abandoned(coordinator.abandoned - self._abandoned)
            self._abandoned = coordinator.abandoned
        recoveries = coordinator.recoveries
        for index in range(self._recoveries, len(recoveries)):
            recovery = recoveries[index]
            if recovery.restored_at is None:
                if index == len(recoveries) - 1:
                    break  # still restoring: counted once done
                self._recoveries += 1  # superseded by a later rollback
                continue
            seconds = recovery.restored_at - recovery.detected_at
            mechanisms = {
                m
                for r in recovery.restores.values()
                for m in _mechanism(r).split(",")
                if m and m != "none"
            }
            # a rollback that restored no state (nothing committed yet) is none
            for mechanism in sorted(mechanisms) or ["none"]:
                self.metrics.recovery(mechanism, seconds)
            self._recoveries += 1


def _mechanism(restore: Any) -> str:
    """The transfer structure a restore used (star, line, tree), for the label.

    A lazy restore's ``used`` says how it installs (on demand, then in the
    background), not a structure: its planned ``mechanism`` names it.
    """
    used = str(restore.get("used") or "")
    if used == LAZY_FETCH:
        used = ""
    return used or str(restore.get("mechanism") or "")


def _bytes(report: Any) -> int:
    if isinstance(report, dict):
        return int(report.get("bytes", 0) or 0)
    return 0
