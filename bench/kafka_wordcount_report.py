"""The report of bench/kafka_wordcount.py: table rows and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.kafka_wordcount_engines import GUARANTEES


def rows_of(results: dict[str, Any]) -> list[list[str]]:
    """Table rows: what, lines/s, ratio to the plain consumer, EO/ALO, latency."""
    bound = results["plain_consumer_records_per_s"]
    rows = [
        ["plain confluent-kafka consumer (bound)", f"{bound:,}", "1.00", "", ""],
        [
            "KafkaSpout alone (next_tuple, in-process)",
            f"{results['kafka_spout_alone_records_per_s']:,}",
            f"{results['kafka_spout_alone_records_per_s'] / bound:.2f}",
            "",
            "",
        ],
    ]
    for engine, label in (
        ("local", "local cluster"),
        ("storm", "Apache Storm 2.8.3"),
        ("spark", "Spark"),
    ):
        eo = results.get(f"{engine}_exactly-once")
        alo = results.get(f"{engine}_at-least-once")
        for guarantee, cell in (("exactly-once", eo), ("at-least-once", alo)):
            name = f"{label}, sink {guarantee}"
            if cell is None or "not_run" in cell:
                reason = (cell or {}).get("not_run", "not run")
                rows.append([name, "not run", "", "", reason])
                continue
            rate = cell["lines_per_s"]
            vs = ""
            if guarantee == "exactly-once" and alo and "lines_per_s" in alo:
                vs = f"{rate / alo['lines_per_s']:.2f}"
            lat = (
                f"p50 {cell['latency_p50_s']} s, p95 {cell['latency_p95_s']} s"
                if "latency_p50_s" in cell
                else f"start-up {cell['startup_s']} s"
                if "startup_s" in cell
                else ""
            )
            rows.append([name, f"{rate:,}", f"{rate / bound:.3f}", vs, lat])
    return rows


HEADERS = ["measure", "lines/s", "/ bound", "EO / ALO", "output latency or note"]


def plot(results: dict[str, Any], path: Path) -> None:
    """Bars of lines/s per configuration (log scale) and the latency of both sinks."""
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels, values = [], []
    for row in rows_of(results):
        if row[1] != "not run":
            labels.append(row[0].replace(", sink ", "\n"))
            values.append(float(row[1].replace(",", "")))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]}
    )
    left.barh(labels, values, color="tab:blue")
    left.set_xscale("log")
    left.invert_yaxis()
    left.set_xlabel("lines (records) per second, log scale")
    left.set_title(f"Kafka word count, {results['lines']:,} lines")
    for guarantee, x in zip(GUARANTEES, (0, 1), strict=True):
        cell = results[f"local_{guarantee}"]
        right.bar(
            [x - 0.2, x + 0.2],
            [cell["latency_p50_s"], cell["latency_p95_s"]],
            width=0.4,
            color=["tab:green", "tab:orange"],
        )
    right.set_xticks([0, 1], ["exactly-once", "at-least-once"])
    right.set_ylabel("s from send to visible count (p50 green, p95 orange)")
    right.set_title(f"output latency, interval {results['interval_s']:g} s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
