"""The report of ``sr3 compare``: ``results.json``, ``report.md``, ``report.html``.

Everything the report shows is read from the results dict (what
:func:`sr3_cli.compare.compare_engines` returns, saved as ``results.json``):
no figure is computed here, so each number of ``report.md`` is one of
``results.json``. ``report.html`` is one self-contained page: the tables of
``report.md`` and the plots as PNG data URIs (matplotlib, Agg), no external
link. The plots (:mod:`sr3_cli.compare_plots`) come first, each ``PLOT_W`` x
``PLOT_H`` pixels, one under the other below a header :data:`HEADER_PX` high,
so a screenshot shows where each one is.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sr3_cli.compare_plots import PHASES, PLOT_H, PLOT_W, PLOTS, plot_png, run_latency

__all__ = ["HEADER_PX", "PLOTS", "PLOT_H", "PLOT_W", "markdown", "write_report"]

#: Height of ``report.html``'s header, above the plots.
HEADER_PX: Final = 64


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _summary_rows(results: Mapping[str, Any]) -> list[list[Any]]:
    runs = results["runs"]
    engines = results["engines"]

    def row(label: str, pick: Any) -> list[Any]:
        return [label, *(pick(runs[e]) for e in engines)]

    rows = [
        row("wall time of the run, s", lambda r: r["wall_s"]),
        row("run seconds (report)", lambda r: r["report"]["seconds"]),
        row(
            "of which Spark session start, s",
            lambda r: r["report"].get("session_start_s"),
        ),
        row("spout tuples", lambda r: r["report"]["throughput"]["spout_tuples"]),
        row(
            "spout tuples/s",
            lambda r: r["report"]["throughput"]["spout_tuples_per_s"],
        ),
        row("checkpoints committed", lambda r: r["report"]["checkpoints"]["count"]),
        row(
            "checkpoint mean s",
            lambda r: r["report"]["checkpoints"]["mean_duration_s"],
        ),
        row("checkpoint max s", lambda r: r["report"]["checkpoints"]["max_duration_s"]),
        row("recoveries", lambda r: len(r["report"]["recoveries"])),
        row("task kills applied", lambda r: r["task_kills_applied"]),
    ]
    for pct in ("p50", "p90", "p99", "max"):
        rows.append(row(f"latency {pct} ms", lambda r, p=pct: run_latency(r, p)))
    for name in results["stateful"]:
        rows.append(row(f"state {name}: keys", lambda r, n=name: r["state"][n]["keys"]))
        rows.append(
            row(f"state {name}: bytes", lambda r, n=name: r["state"][n]["bytes"])
        )
        rows.append(
            row(f"state {name}: epoch", lambda r, n=name: r["state"][n]["epoch"])
        )
    return rows


def _recovery_rows(results: Mapping[str, Any]) -> list[list[Any]]:
    return [
        [
            engine,
            r["cause"],
            r["at_s"],
            r["mechanism"],
            r.get("used"),
            *(r["timeline"].get(p) for p in PHASES),
        ]
        for engine in results["engines"]
        for r in results["runs"][engine]["report"]["recoveries"]
    ]


def _verdict_lines(results: Mapping[str, Any]) -> list[str]:
    engines = ", ".join(results["engines"])
    if results["agree"]:
        lines = [f"**AGREE**: {engines} end in the same state, key by key.", ""]
    else:
        lines = [f"**DISAGREE**: {engines} do not end in the same state.", ""]
    lines += _table(
        ["engine vs " + results["reference"], "what", "component", "keys", "differing"],
        [
            [c["engine"], c["what"], c["component"], c["keys"], c["differing"]]
            for c in results["compared"]
        ],
    )
    for diff in results["differences"]:
        lines.append(
            f"First differing keys of {diff['what']} {diff['component']} "
            f"({diff['engine']} vs {diff['reference']}):"
        )
        lines.append("")
        lines += _table(
            ["key", diff["reference"], diff["engine"]],
            [
                [
                    f"`{k['key']}`",
                    f"`{json.dumps(k[diff['reference']])}`",
                    f"`{json.dumps(k[diff['engine']])}`",
                ]
                for k in diff["first_keys"]
            ],
        )
    return lines


_LATENCY_NOTE: Final = (
    "Latency: Spark's is each micro-batch's duration, trigger to commit (a row "
    "also waits for its batch to start); the Storm engine's is Storm's complete "
    "latency, a spout tuple's emit to the ack of its whole tree (replays after a "
    "rollback count from their new emit); Apache Storm's is not collected."
)


def _network_lines(results: Mapping[str, Any]) -> list[str]:
    """Say where the engines ran: the netns lab's hosts and their links, if any."""
    network = results.get("network")
    if not network:
        return []
    hosts = ", ".join(f"{h} ({a})" for h, a in network["hosts"].items())
    return [
        f"Network: network-namespace hosts {hosts}; every host's link shaped "
        f"`{network['shape']}` (two hosts see the sum of their links; see "
        "docs/lab.md). The CLI, the local cluster and Spark's driver run in the "
        "root namespace, ZooKeeper and the ring nodes (and Apache Storm's daemons "
        "and workers) on the hosts.",
        "",
    ]


def _apache_storm_note(results: Mapping[str, Any]) -> list[str]:
    """Warn that Apache Storm's counts restart with a worker a kill restarted."""
    run = results["runs"].get("apache-storm")
    if not run or not run.get("task_kills_applied"):
        return []
    return [
        "apache-storm's tuple counts are Nimbus's statistics: they start from "
        "zero again in a worker that restarted and reach Nimbus with the workers' "
        "heartbeats, so after a task kill they undercount the run (its state is "
        "compared all the same).",
        "",
    ]


def markdown(results: Mapping[str, Any]) -> str:
    """Return ``report.md``: the verdict, then every figure in tables."""
    schedule = results["schedule"]
    kills = [f"{k['component']}:{k['index']}@{k['at_s']}" for k in schedule["kills"]]
    kills += [f"node {k['node']}@{k['at_s']}" for k in schedule["node_kills"]]
    conf = ", ".join(f"{k}={v}" for k, v in results["conf"].items()) or "none"
    lines = [
        f"# sr3 compare: {results['topology']} on {', '.join(results['engines'])}",
        "",
        f"Topology file `{results['file']}`; conf overrides: {conf}; failures: "
        f"{', '.join(kills) or 'none'}. Each engine ran until idle from empty "
        "state in the same lab; task kills apply to the Storm engines only (Spark "
        "retries its own tasks). Raw figures: `results.json`.",
        "",
        *_network_lines(results),
        "## Verdict",
        "",
        *_verdict_lines(results),
        "## Figures",
        "",
        *_table(["figure", *results["engines"]], _summary_rows(results)),
        _LATENCY_NOTE,
        "",
        *_apache_storm_note(results),
        "## Recoveries",
        "",
    ]
    rows = _recovery_rows(results)
    if rows:
        lines += _table(
            [
                "engine",
                "cause",
                "at s",
                "mechanism",
                "used",
                "detect s",
                "restore s",
                "replay s",
            ],
            rows,
        )
    else:
        lines += ["No recovery in any run.", ""]
    every = results["sample_s"]
    lines += [f"## Throughput peaks (tuples/s, sampled every {every} s)", ""]
    peaks = [
        [engine, name, value]
        for engine in results["engines"]
        for name, value in results["runs"][engine]["throughput"]["peak_per_s"].items()
    ]
    lines += (
        _table(["engine", "component", "peak tuples/s"], peaks)
        if peaks
        else [
            "No throughput samples (the runs ended before their first sample).",
            "",
        ]
    )
    return "\n".join(lines)


def _md_to_html(md: str) -> str:
    """Render the report's Markdown subset: headings, bold lines, tables, text."""
    out: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            head, *body = rows
            out.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>")
            out.extend(
                "<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body
            )
            out.append("</table>")
            rows.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            cells = [
                html.escape(c.strip().strip("`")) for c in line.strip("|").split("|")
            ]
            if not all(c == "---" for c in cells):
                rows.append(cells)
            continue
        flush()
        text = html.escape(line)
        if line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("**"):
            out.append("<p>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text) + "</p>")
        elif line:
            out.append(f"<p>{text}</p>")
    flush()
    return "\n".join(out)


def html_page(results: Mapping[str, Any], md: str) -> str:
    """Return ``report.html``: the plots, then the Markdown report's content."""
    imgs = "\n".join(
        f'<img alt="{name}" width="{PLOT_W}" height="{PLOT_H}" '
        f'src="data:image/png;base64,{plot_png(name, results)}">'
        for name in PLOTS
    )
    verdict = "AGREE" if results["agree"] else "DISAGREE"
    title = html.escape(f"sr3 compare: {results['topology']}: {verdict}")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ margin: 0; font-family: sans-serif; }}
header {{ height: {HEADER_PX}px; overflow: hidden; margin: 0; padding: 0 8px;
  box-sizing: border-box; }}
img {{ display: block; margin: 0; padding: 0; border: 0; }}
main {{ padding: 0 8px; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
td, th {{ border: 1px solid #999; padding: 2px 6px; text-align: left; }}
</style></head>
<body><header><h1 style="margin:0;line-height:{HEADER_PX}px;font-size:22px">{title}</h1>
</header>
{imgs}
<main>
{_md_to_html(md)}
</main></body></html>
"""


def write_report(results: Mapping[str, Any], out: Path) -> None:
    """Write ``results.json``, ``report.md`` and ``report.html`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    md = markdown(results)
    (out / "report.md").write_text(md, encoding="utf-8")
    (out / "report.html").write_text(html_page(results, md), encoding="utf-8")
