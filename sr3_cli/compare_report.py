"""The report of ``sr3 compare``: ``results.json``, ``report.md``, ``report.html``.

Everything the report shows is read from the results dict (what
:func:`sr3_cli.compare.compare_engines` returns, saved as ``results.json``):
no figure is computed here, so each number of ``report.md`` is one of
``results.json``. ``report.html`` is one self-contained page: the tables of
``report.md`` and the plots as PNG data URIs (matplotlib, Agg), no external
link. The plots come first, each :data:`PLOT_W` x :data:`PLOT_H` pixels, one
under the other below a header :data:`HEADER_PX` high, so a screenshot shows
where each one is.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["HEADER_PX", "PLOTS", "PLOT_H", "PLOT_W", "markdown", "write_report"]

#: The plots of ``report.html``, top to bottom.
PLOTS: Final = ("throughput", "latency", "recovery", "checkpoints", "state")
PLOT_W: Final = 640
PLOT_H: Final = 320
HEADER_PX: Final = 64
_DPI: Final = 80
_PHASES: Final = ("detect_s", "restore_s", "replay_s")
_COLORS: Final = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


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
        rows.append(
            row(f"micro-batch latency {pct} ms", lambda r, p=pct: _latency(r, p))
        )
    for name in results["stateful"]:
        rows.append(row(f"state {name}: keys", lambda r, n=name: r["state"][n]["keys"]))
        rows.append(
            row(f"state {name}: bytes", lambda r, n=name: r["state"][n]["bytes"])
        )
        rows.append(
            row(f"state {name}: epoch", lambda r, n=name: r["state"][n]["epoch"])
        )
    return rows


def _latency(run: Mapping[str, Any], pct: str) -> Any:
    batches = run["report"].get("micro_batches")
    return None if batches is None else batches["latency_ms"].get(pct)


def _recovery_rows(results: Mapping[str, Any]) -> list[list[Any]]:
    return [
        [
            engine,
            r["cause"],
            r["at_s"],
            r["mechanism"],
            r.get("used"),
            *(r["timeline"].get(p) for p in _PHASES),
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
        "## Verdict",
        "",
        *_verdict_lines(results),
        "## Figures",
        "",
        *_table(["figure", *results["engines"]], _summary_rows(results)),
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


def _figure() -> Figure:
    return plt.figure(figsize=(PLOT_W / _DPI, PLOT_H / _DPI), dpi=_DPI)


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _is_spout(component: str, results: Mapping[str, Any]) -> bool:
    """Spark's metrics count all spouts as one ``a+b`` component."""
    return all(part in results["spouts"] for part in component.split("+"))


def _plot_throughput(results: Mapping[str, Any]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    kills = results["schedule"]["kills"]
    node_kills = results["schedule"]["node_kills"]
    for i, engine in enumerate(results["engines"]):
        run = results["runs"][engine]
        tp = run["throughput"]
        spouts = [tp["per_s"][n] for n in tp["per_s"] if _is_spout(n, results)]
        total = [sum(v) for v in zip(*spouts, strict=False)]
        color = _COLORS[i % len(_COLORS)]
        if total:
            ax.plot(tp["t_s"], total, label=engine, color=color)
        marks = [k["at_s"] for k in node_kills]
        if run["task_kills_applied"]:
            marks += [k["at_s"] for k in kills]
        for at_s in marks:
            ax.axvline(at_s, color=color, linestyle="--", linewidth=1)
    ax.set_title("spout tuples/s over time (dashed: failures injected)")
    ax.set_xlabel("s since the engine's run began (Spark: its session start too)")
    ax.set_ylabel("tuples/s")
    if ax.lines:
        ax.legend(loc="upper right", fontsize="small")
    else:
        _empty(ax, "no throughput samples")
    fig.tight_layout()
    return fig


def _plot_latency(results: Mapping[str, Any]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    pcts = ("p50", "p90", "p99", "max")
    shown = 0
    width = 0.8 / len(results["engines"])
    for i, engine in enumerate(results["engines"]):
        values = [_latency(results["runs"][engine], p) for p in pcts]
        if all(v is None for v in values):
            continue
        xs = [j + i * width for j in range(len(pcts))]
        ax.bar(xs, [v or 0 for v in values], width, label=engine, color=_COLORS[i])
        shown += 1
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(pcts))], pcts)
    missing = [
        e for e in results["engines"] if _latency(results["runs"][e], "p50") is None
    ]
    note = f" ({', '.join(missing)}: not reported)" if missing else ""
    ax.set_title(f"micro-batch latency percentiles, ms{note}")
    ax.set_ylabel("ms")
    if shown:
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no engine reports latency percentiles")
    fig.tight_layout()
    return fig


def _plot_recovery(results: Mapping[str, Any]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    labels: list[str] = []
    for engine in results["engines"]:
        for r in results["runs"][engine]["report"]["recoveries"]:
            y = len(labels)
            labels.append(f"{engine} {r['mechanism']} @{r['at_s']}s")
            left = 0.0
            for j, phase in enumerate(_PHASES):
                seconds = r["timeline"].get(phase) or 0.0
                ax.barh(
                    y,
                    seconds,
                    left=left,
                    color=_COLORS[j],
                    label=phase[:-2] if y == 0 else None,
                )
                left += seconds
    if labels:
        ax.set_yticks(range(len(labels)), labels, fontsize="small")
        ax.legend(fontsize="small", loc="lower right")
    else:
        _empty(ax, "no recovery in any run")
    ax.set_title("recovery timelines: detect, restore, replay (s)")
    ax.set_xlabel("s")
    fig.tight_layout()
    return fig


def _grouped(
    ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]]
) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [j + i * width for j in range(len(groups))]
        ax.bar(xs, values, width, label=name, color=_COLORS[i % len(_COLORS)])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], groups)
    ax.legend(fontsize="small")


def _plot_checkpoints(results: Mapping[str, Any]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    engines = results["engines"]
    cps = [results["runs"][e]["report"]["checkpoints"] for e in engines]
    _grouped(
        ax,
        engines,
        {
            "mean": [c.get("mean_duration_s") or 0.0 for c in cps],
            "max": [c.get("max_duration_s") or 0.0 for c in cps],
        },
    )
    ax.set_title("checkpoint durations, s (mean and max per engine)")
    ax.set_ylabel("s")
    fig.tight_layout()
    return fig


def _plot_state(results: Mapping[str, Any]) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    names = list(results["stateful"])
    if names:
        _grouped(
            ax,
            names,
            {
                e: [results["runs"][e]["state"][n]["keys"] for n in names]
                for e in results["engines"]
            },
        )
    else:
        _empty(ax, "no stateful component")
    ax.set_title("final state size per component, keys")
    ax.set_ylabel("keys")
    fig.tight_layout()
    return fig


_PLOTTERS: Final = {
    "throughput": _plot_throughput,
    "latency": _plot_latency,
    "recovery": _plot_recovery,
    "checkpoints": _plot_checkpoints,
    "state": _plot_state,
}


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
        f'src="data:image/png;base64,{_png(_PLOTTERS[name](results))}">'
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
