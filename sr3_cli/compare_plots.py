"""The plots of ``sr3 compare``'s ``report.html`` (matplotlib, Agg, PNG).

Each plot reads the results dict only (:func:`sr3_cli.compare.compare_engines`),
as the report's tables do: :func:`plot_png` draws one of :data:`PLOTS`,
:data:`PLOT_W` x :data:`PLOT_H` pixels, and returns it base64-encoded for a
data URI.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any, Final

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["PHASES", "PLOTS", "PLOT_H", "PLOT_W", "plot_png", "run_latency"]

#: The plots of ``report.html``, top to bottom.
PLOTS: Final = ("throughput", "latency", "recovery", "checkpoints", "state")
PLOT_W: Final = 640
PLOT_H: Final = 320
_DPI: Final = 80
#: The phases of a recovery the report and its plot show.
PHASES: Final = ("detect_s", "restore_s", "replay_s")
_COLORS: Final = ("tab:blue", "tab:orange", "tab:green", "tab:purple")
#: The least bar height of the log-scale latency plot (a 0 ms percentile).
_LOG_FLOOR_MS: Final = 0.1


def run_latency(run: Mapping[str, Any], pct: str) -> Any:
    """A run's latency percentile ``pct`` in ms (None: not reported).

    Spark's micro-batches' durations; the local Storm cluster's complete
    latency of its tuple trees (spout emit to the ack of the whole tree).
    """
    report = run["report"]
    batches = report.get("micro_batches")
    if batches is not None:
        return batches["latency_ms"].get(pct)
    complete = report.get("complete_latency_ms")
    return None if not complete else complete.get(pct)


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
        values = [run_latency(results["runs"][engine], p) for p in pcts]
        if all(v is None for v in values):
            continue
        xs = [j + i * width for j in range(len(pcts))]
        # a log scale: a Storm tree's milliseconds beside a micro-batch's seconds
        heights = [max(float(v), _LOG_FLOOR_MS) if v is not None else 0 for v in values]
        bars = ax.bar(xs, heights, width, label=engine, color=_COLORS[i])
        labels = [f"{v:g}" if v is not None else "" for v in values]
        ax.bar_label(bars, labels=labels, fontsize="x-small", padding=1)
        shown += 1
    if shown:
        ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(pcts))], pcts)
    missing = [
        e for e in results["engines"] if run_latency(results["runs"][e], "p50") is None
    ]
    note = f" ({', '.join(missing)}: not reported)" if missing else ""
    ax.set_title(f"latency percentiles, ms (log scale){note}")
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
            for j, phase in enumerate(PHASES):
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


def plot_png(name: str, results: Mapping[str, Any]) -> str:
    """Draw plot ``name`` (one of :data:`PLOTS`); return the PNG, base64-encoded."""
    return _png(_PLOTTERS[name](results))
