"""The metric table, docs/metrics.md and what the registries export agree."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sr3.metrics import (
    MECHANISMS,
    METRICS,
    NODE,
    RUN,
    NodeMetrics,
    RunMetrics,
    metrics_markdown,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def _exported(registry: CollectorRegistry) -> dict[str, list[dict[str, str]]]:
    """Return {sample name: [labels of each sample]} of one scrape."""
    text = generate_latest(registry).decode()
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples


def test_docs_metrics_md_is_generated_from_the_table() -> None:
    assert DOC.read_text(encoding="utf-8") == metrics_markdown(), (
        "docs/metrics.md is stale: run .venv/bin/python -m sr3.metrics docs/metrics.md"
    )


def test_every_metric_is_named_with_sr3_prefix_and_a_unit_or_total() -> None:
    names = [spec.name for spec in METRICS]
    assert len(names) == len(set(names))
    for spec in METRICS:
        assert spec.name.startswith("sr3_")
        assert spec.kind in {"counter", "gauge", "histogram"}
        assert (spec.kind == "counter") == spec.name.endswith("_total")
        assert f"`{spec.name}`" in DOC.read_text(encoding="utf-8")


def test_a_node_exports_exactly_the_node_rows_and_its_store_counts() -> None:
    metrics = NodeMetrics(
        "n1", shards=lambda: 7, stored_bytes=lambda: 4096, is_leader=lambda: True
    )
    metrics.repair_pass(under=2, lost=0, copies=3, copied_bytes=300, seconds=0.2)
    samples = _exported(metrics.registry)
    wanted = {n for s in METRICS if s.side == NODE for n in s.scraped_names}
    assert wanted <= set(samples)
    node_specs = [s for s in METRICS if s.side == NODE]
    allowed = wanted | {s.name.removesuffix("_total") for s in node_specs}
    assert {n.removesuffix("_created") for n in samples} <= allowed
    text = metrics.registry.get_sample_value
    assert text("sr3_node_shards", {"node": "n1"}) == 7
    assert text("sr3_node_stored_bytes", {"node": "n1"}) == 4096
    assert text("sr3_under_replicated_shards", {"node": "n1"}) == 2
    assert text("sr3_repair_copies_total", {"node": "n1"}) == 3


def test_a_run_exports_every_run_row_and_counts_tuples_by_their_growth() -> None:
    metrics = RunMetrics("wc")
    metrics.tuples({"spout": 10, "count": 4}, {"spout": 1})
    metrics.tuples({"spout": 25, "count": 4}, {"spout": 1})
    metrics.pending("count", 3)
    metrics.checkpoint(seconds=0.3, size_bytes=2048)
    metrics.recovery("tree", 1.5)
    samples = _exported(metrics.registry)
    wanted = {n for s in METRICS if s.side == RUN for n in s.scraped_names}
    assert wanted <= set(samples)
    value = metrics.registry.get_sample_value
    assert value("sr3_tuples_total", {"topology": "wc", "component": "spout"}) == 25
    assert value("sr3_tuples_total", {"topology": "wc", "component": "count"}) == 4
    # every mechanism is exported before it is used, at 0
    for mechanism in MECHANISMS:
        labels = {"topology": "wc", "mechanism": mechanism, "scope": "global"}
        expected = 1 if mechanism == "tree" else 0
        assert value("sr3_recoveries_total", labels) == expected
    assert value("sr3_checkpoint_size_bytes_sum", {"topology": "wc"}) == 2048
