"""Storm's own counters and errors of a topology, from Nimbus's ``TopologyInfo``.

Counts are the ``:all-time`` window of every executor; the report asks for
``topology.stats.sample.rate`` 1.0 so they are exact, not 5 % samples.
Streams whose id starts with ``__`` (acking, metrics, system) are Storm's own
and left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from topology_api.barriers import internal_stream
from topology_api.topology import LoadedTopology

__all__ = ["counters_of", "errors_of"]

_ALL_TIME: Final = ":all-time"


def _user_total(by_stream: Mapping[Any, int] | None) -> int:
    total = 0
    for stream, count in (by_stream or {}).items():
        name = getattr(stream, "streamId", stream)
        if not internal_stream(name):
            total += int(count)
    return total


def counters_of(info: Any, topology: LoadedTopology) -> dict[str, dict[str, int]]:
    """Return per-component counters shaped as the local engine reports them."""
    counters = {
        name: {
            "spout_emitted": 0,
            "bolt_acked": 0,
            "emitted": 0,
            "acked": 0,
            "failed": 0,
            "restarts": 0,
            "errors": 0,
        }
        for name in topology.components
    }
    for executor in info.executors or []:
        row = counters.get(executor.component_id)
        stats = executor.stats
        if row is None or stats is None:
            continue
        emitted = _user_total((stats.emitted or {}).get(_ALL_TIME))
        specific = stats.specific
        inner = specific.bolt if specific.bolt is not None else specific.spout
        acked = _user_total((inner.acked or {}).get(_ALL_TIME)) if inner else 0
        failed = _user_total((inner.failed or {}).get(_ALL_TIME)) if inner else 0
        row["emitted"] += emitted
        row["acked"] += acked
        row["failed"] += failed
        if specific.bolt is not None:
            row["bolt_acked"] += acked
        else:
            row["spout_emitted"] += emitted
    for name, errors in (info.errors or {}).items():
        if name in counters:
            counters[name]["errors"] = len(errors)
    return counters


def errors_of(info: Any, marks: Sequence[str] = ()) -> list[str]:
    """Return the errors tasks reported to Storm, oldest first, one line each.

    Each is ``component: line``: the first line of the error holding one of
    ``marks`` (a Python exception deep in a Java stack trace), else its first.
    """
    found: list[tuple[int, str]] = []
    for component, errors in (info.errors or {}).items():
        for error in errors or []:
            lines = [ln.strip() for ln in str(error.error).strip().splitlines()]
            marked = [ln for ln in lines if any(m in ln for m in marks)]
            text = (marked or lines or [""])[0]
            found.append((int(error.error_time_secs or 0), f"{component}: {text}"))
    return [text for _, text in sorted(found)]
