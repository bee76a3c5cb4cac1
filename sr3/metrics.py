"""Prometheus metrics: the one table of every ``sr3_*`` metric, and their endpoints.

:data:`METRICS` names each metric, its type, labels and meaning; ``docs/metrics.md``
is generated from it (``python -m sr3.metrics docs/metrics.md``) and a unit test
fails when they differ. A ring node holds a :class:`NodeMetrics`, a topology run
(local cluster or Spark) a :class:`RunMetrics`; each serves its own registry on
127.0.0.1 with :func:`sr3.metrics_serving.serve` (port 0: a free one). Rates
(tuples per second) come from PromQL, as ``rate(sr3_tuples_total[1m])``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

__all__ = [
    "MECHANISMS",
    "METRICS",
    "NODE",
    "RUN",
    "SCOPES",
    "MetricSpec",
    "NodeMetrics",
    "RunMetrics",
    "metrics_markdown",
]

#: Where a metric is served.
NODE: Final = "ring node"
RUN: Final = "topology run"
#: Recovery mechanisms every run reports (at 0 until one is used).
MECHANISMS: Final = ("star", "line", "tree", "parallel")
#: Recovery scopes: ``global`` (the whole topology rolls back); ``task`` is kept
#: for local recovery.
SCOPES: Final = ("global",)
_DURATION_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SIZE_BUCKETS: Final = tuple(float(4**i * 1024) for i in range(10))  # 1 KiB..256 GiB


@dataclass(frozen=True)
class MetricSpec:
    """One ``sr3_*`` metric.

    Attributes:
        name: Its name as scraped (counters end in ``_total``).
        kind: ``counter``, ``gauge`` or ``histogram``.
        labels: Its label names.
        doc: What it means.
        side: Where it is served: :data:`NODE` or :data:`RUN`.
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    doc: str
    side: str

    @property
    def scraped_names(self) -> tuple[str, ...]:
        """The series names Prometheus stores for it."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


_N: Final = ("node",)
_T: Final = ("topology",)
_TC: Final = ("topology", "component")
_TMS: Final = ("topology", "mechanism", "scope")
# fmt: off
METRICS: Final = (
    MetricSpec("sr3_node_shards", "gauge", _N,
               "Shard replicas this ring node stores.", NODE),
    MetricSpec("sr3_node_stored_bytes", "gauge", _N,
               "Payload bytes of the replicas this ring node stores.", NODE),
    MetricSpec("sr3_repair_leader", "gauge", _N,
               "1 while this node is the elected repair coordinator, else 0.", NODE),
    MetricSpec("sr3_under_replicated_shards", "gauge", _N,
               "Shards with fewer live holders than the replication factor when "
               "this node's last repair pass began (only the leader repairs: "
               "`max()` over nodes).", NODE),
    MetricSpec("sr3_lost_shards", "gauge", _N,
               "Shards with no live holder in this node's last repair pass.", NODE),
    MetricSpec("sr3_repair_passes_total", "counter", _N,
               "Repair passes this node ran as leader.", NODE),
    MetricSpec("sr3_repair_copies_total", "counter", _N,
               "Replicas repair copied to a node that lacked them.", NODE),
    MetricSpec("sr3_repair_copied_bytes_total", "counter", _N,
               "Bytes of those copies.", NODE),
    MetricSpec("sr3_repair_duration_seconds", "histogram", _N,
               "Duration of a repair pass.", NODE),
    MetricSpec("sr3_tuples_total", "counter", _TC,
               "Tuples a component processed: emitted by a spout, acked by a "
               "bolt (`rate()` gives tuples/s).", RUN),
    MetricSpec("sr3_tuples_failed_total", "counter", _TC,
               "Tuples failed (spout trees failed or timed out, bolt `fail`s).",
               RUN),
    MetricSpec("sr3_pending_tuples", "gauge", _TC,
               "Backpressure: tuples delivered to the component's tasks and not "
               "yet acked or failed (Spark: rows of the last micro-batch).", RUN),
    MetricSpec("sr3_checkpoints_total", "counter", ("topology", "outcome"),
               "Checkpoint epochs by outcome: committed or abandoned.", RUN),
    MetricSpec("sr3_checkpoint_duration_seconds", "histogram", _T,
               "Time from an epoch's start to its commit (Spark: a micro-batch "
               "with its ring commit).", RUN),
    MetricSpec("sr3_checkpoint_size_bytes", "histogram", _T,
               "Snapshot bytes written to the ring by one committed epoch.", RUN),
    MetricSpec("sr3_recoveries_total", "counter", _TMS,
               "Recoveries by the mechanism that restored the state (star, "
               "line or tree; `none` when nothing was committed yet; `parallel` "
               "is exported for the parallel mechanism, not built yet) and scope "
               "(`global`: the whole topology rolled back; `task` is kept for "
               "local recovery).", RUN),
    MetricSpec("sr3_recovery_duration_seconds", "histogram", _TMS,
               "Time from a failure's detection until every stateful task "
               "restored its state (local cluster; a Spark run exports it at 0: "
               "its restore runs inside the query).", RUN),
)
# fmt: on
_SPECS: Final = {spec.name: spec for spec in METRICS}


def _counter(spec: str, registry: CollectorRegistry) -> Counter:
    s = _SPECS[spec]
    return Counter(s.name, s.doc, s.labels, registry=registry)


def _gauge(spec: str, registry: CollectorRegistry) -> Gauge:
    s = _SPECS[spec]
    return Gauge(s.name, s.doc, s.labels, registry=registry)


def _histogram(
    spec: str, registry: CollectorRegistry, buckets: tuple[float, ...]
) -> Histogram:
    s = _SPECS[spec]
    return Histogram(s.name, s.doc, s.labels, registry=registry, buckets=buckets)


class NodeMetrics:
    """A ring node's metrics (:data:`NODE` rows of :data:`METRICS`).

    Args:
        node_id: The node's id (the ``node`` label).
        shards: Returns how many replicas the node stores (read per scrape).
        stored_bytes: Returns their payload bytes (read per scrape).
        is_leader: Returns whether the node leads repair (read per scrape).
    """

    def __init__(
        self,
        node_id: str,
        *,
        shards: Callable[[], int],
        stored_bytes: Callable[[], int],
        is_leader: Callable[[], bool],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        _gauge("sr3_node_shards", r).labels(node_id).set_function(shards)
        _gauge("sr3_node_stored_bytes", r).labels(node_id).set_function(stored_bytes)
        leader = _gauge("sr3_repair_leader", r).labels(node_id)
        leader.set_function(lambda: 1.0 if is_leader() else 0.0)
        self._under = _gauge("sr3_under_replicated_shards", r).labels(node_id)
        self._lost = _gauge("sr3_lost_shards", r).labels(node_id)
        self._passes = _counter("sr3_repair_passes_total", r).labels(node_id)
        self._copies = _counter("sr3_repair_copies_total", r).labels(node_id)
        self._bytes = _counter("sr3_repair_copied_bytes_total", r).labels(node_id)
        self._seconds = _histogram(
            "sr3_repair_duration_seconds", r, _DURATION_BUCKETS
        ).labels(node_id)

    def repair_pass(
        self, *, under: int, lost: int, copies: int, copied_bytes: int, seconds: float
    ) -> None:
        """Record one repair pass this node ran as leader."""
        self._under.set(under)
        self._lost.set(lost)
        self._passes.inc()
        self._copies.inc(copies)
        self._bytes.inc(copied_bytes)
        self._seconds.observe(seconds)


class RunMetrics:
    """A topology run's metrics (:data:`RUN` rows of :data:`METRICS`).

    Every recovery mechanism and scope, and both checkpoint outcomes, are
    exported from the start (at 0), so a dashboard sees them before the first
    failure. Cumulative counts an engine keeps itself are handed over with
    :meth:`tuples`, which adds only what grew since the previous call.

    Args:
        topology: The topology's name (the ``topology`` label).
    """

    def __init__(self, topology: str) -> None:
        self.topology = topology
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._tuples = _counter("sr3_tuples_total", r)
        self._failed = _counter("sr3_tuples_failed_total", r)
        self._pending = _gauge("sr3_pending_tuples", r)
        self._checkpoints = _counter("sr3_checkpoints_total", r)
        self._ckpt_seconds = _histogram(
            "sr3_checkpoint_duration_seconds", r, _DURATION_BUCKETS
        ).labels(topology)
        self._ckpt_bytes = _histogram(
            "sr3_checkpoint_size_bytes", r, _SIZE_BUCKETS
        ).labels(topology)
        self._recoveries = _counter("sr3_recoveries_total", r)
        self._recovery_seconds = _histogram(
            "sr3_recovery_duration_seconds", r, _DURATION_BUCKETS
        )
        for outcome in ("committed", "abandoned"):
            self._checkpoints.labels(topology, outcome)
        for mechanism in MECHANISMS:
            for scope in SCOPES:
                self._recoveries.labels(topology, mechanism, scope)
                self._recovery_seconds.labels(topology, mechanism, scope)
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def tuples(
        self, processed: Mapping[str, int], failed: Mapping[str, int] | None = None
    ) -> None:
        """Take cumulative per-component counts; the counters grow by the change."""
        with self._lock:
            for kind, counts, counter in (
                ("ok", processed, self._tuples),
                ("failed", failed or {}, self._failed),
            ):
                for component, total in counts.items():
                    before = self._seen.get((kind, component), 0.0)
                    child = counter.labels(self.topology, component)
                    if total > before:
                        child.inc(total - before)
                        self._seen[kind, component] = float(total)

    def pending(self, component: str, tuples: int) -> None:
        """Set the tuples waiting at ``component`` (backpressure)."""
        self._pending.labels(self.topology, component).set(tuples)

    def checkpoint(self, *, seconds: float, size_bytes: int) -> None:
        """Record one committed epoch."""
        self._checkpoints.labels(self.topology, "committed").inc()
        self._ckpt_seconds.observe(seconds)
        self._ckpt_bytes.observe(size_bytes)

    def checkpoint_abandoned(self, count: int = 1) -> None:
        """Record epochs abandoned after their timeout."""
        self._checkpoints.labels(self.topology, "abandoned").inc(count)

    def recovery(self, mechanism: str, seconds: float, scope: str = "global") -> None:
        """Record one restore of state by ``mechanism``, lasting ``seconds``."""
        self._recoveries.labels(self.topology, mechanism, scope).inc()
        self._recovery_seconds.labels(self.topology, mechanism, scope).observe(seconds)


def metrics_markdown() -> str:
    """Return ``docs/metrics.md``: every metric of :data:`METRICS` in a table."""
    lines = [
        "# Metrics",
        "",
        "<!-- generated from sr3/metrics.py by `python -m sr3.metrics "
        "docs/metrics.md`; do not edit -->",
        "",
        "Every ring node (`sr3 node`) and every topology run (`sr3 run`, on the "
        "local cluster or `--engine spark`) serves Prometheus metrics on "
        "127.0.0.1 (`sr3.metrics.port`, 0: a free port; `sr3.metrics.enabled` "
        "turns them off). Ring nodes advertise their endpoint in ZooKeeper, runs "
        "in the lab (`LAB/prometheus/targets/`); `sr3 status --json` lists every "
        "endpoint under `metrics`. `sr3 lab up --metrics` starts a Prometheus "
        "server scraping them all (its URL: `sr3 status --json`, "
        "`prometheus.url`); while it runs, a run that ends waits up to 3 s for "
        "the scrape that reads its final values (without it, no run waits).",
        "",
        "Rates come from PromQL: tuples per second of a component are "
        '`rate(sr3_tuples_total{component="count"}[1m])`.',
        "",
    ]
    for side in (NODE, RUN):
        lines += [
            f"## Served by every {side}",
            "",
            "| name | type | labels | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for spec in METRICS:
            if spec.side == side:
                labels = ", ".join(f"`{label}`" for label in spec.labels)
                lines.append(f"| `{spec.name}` | {spec.kind} | {labels} | {spec.doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(metrics_markdown(), encoding="utf-8")
