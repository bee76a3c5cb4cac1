"""A Spark run's Prometheus endpoint (``sr3 run --engine spark``), on the driver.

:class:`SparkMetricsFeed` serves a :class:`sr3.metrics.RunMetrics` and copies into
it, every :data:`FEED_INTERVAL_S`, what the driver sees: the query's progress
(spout rows read, all spouts together under one ``component`` label, and the
rows of the last micro-batch as its backlog) and every micro-batch the ring
committed (its duration and snapshot bytes). In a lab it lists its endpoint in
``LAB/prometheus/targets/`` while it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sr3.config import MetricsConfig
from sr3.metrics import RunMetrics
from sr3.metrics_serving import FEED_INTERVAL_S, RunPublisher

__all__ = ["FEED_INTERVAL_S", "SparkMetricsFeed"]

logger = logging.getLogger(__name__)


class SparkMetricsFeed:
    """Serves a Spark run's metrics, fed from its query's progress and commits.

    Args:
        topology: The topology's name.
        spouts: Its spout components (their rows count under one label).
        config: Whether and where to serve.
        targets_dir: The lab's targets dir (None: not listed).
    """

    def __init__(
        self,
        topology: str,
        spouts: Sequence[str],
        config: MetricsConfig,
        targets_dir: Path | None,
    ) -> None:
        self.metrics = RunMetrics(topology)
        self._component = "+".join(sorted(spouts)) or "spouts"
        self._publisher = RunPublisher(
            self.metrics, config, targets_dir, self.feed, "sr3-spark-metrics"
        )
        self._progress: Callable[[], list[dict[str, Any]]] = list
        self._commits: Callable[[], Sequence[Any]] = list
        self._batches: set[int] = set()
        self._rows = 0
        self._committed = 0

    def start(
        self,
        progress: Callable[[], list[dict[str, Any]]],
        commits: Callable[[], Sequence[Any]],
    ) -> None:
        """Serve (when enabled) and feed from ``progress()`` and ``commits()``.

        Args:
            progress: Returns the query's recent progress (``recentProgress``).
            commits: Returns the ring commits so far (``BatchCommit``s).
        """
        self._progress, self._commits = progress, commits
        endpoint = self._publisher.start()
        if endpoint is not None:
            logger.info("Spark run metrics at %s", endpoint.url)

    def close(self) -> None:
        """Feed once more, stop serving, remove the target."""
        self._publisher.close()

    def feed(self) -> None:
        """Copy new progress and commits into the metrics (never raises)."""
        try:
            last = 0
            for entry in self._progress():
                batch = int(entry.get("batchId", -1))
                rows = int(entry.get("numInputRows", 0) or 0)
                last = rows
                if batch not in self._batches:
                    self._batches.add(batch)
                    self._rows += rows
            self.metrics.tuples({self._component: self._rows})
            self.metrics.pending(self._component, last)
            commits = list(self._commits())
            for commit in commits[self._committed :]:
                if commit.epoch is not None:
                    self.metrics.checkpoint(
                        seconds=commit.seconds, size_bytes=commit.bytes_written
                    )
            self._committed = len(commits)
        except Exception:  # a metrics bug must not end the run
            logger.exception("Spark run metrics feed failed")
