"""Tuples per second of a running topology, from its own Prometheus endpoint.

Every run (``sr3 run``, local cluster or Spark) serves ``sr3_tuples_total`` per
component and lists its endpoint in the lab's targets dir as
``run-<topology>-<pid>.json`` (:func:`sr3.metrics_serving.write_target`).
:class:`TupleSampler` finds it there and reads the counters every
:data:`SAMPLE_S`; :func:`per_second` turns the samples into tuples/s.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["SAMPLE_S", "Progress", "TupleSampler", "per_second"]

#: Seconds between two samples of a run's tuple counters.
SAMPLE_S: Final = 0.5
#: Seconds between two progress lines.
_PROGRESS_S: Final = 2.0

Progress = Callable[[str], None]


class TupleSampler:
    """Samples ``sr3_tuples_total`` per component from a run's metrics endpoint.

    The run lists its endpoint in ``targets`` as ``run-<topology>-<pid>.json``
    (:func:`sr3.metrics_serving.write_target`); the sampler finds it there.
    """

    def __init__(
        self, targets: Path, topology: str, engine: str, progress: Progress
    ) -> None:
        self._target = targets / f"run-{topology}-{os.getpid()}.json"
        self._engine = engine
        self._progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[dict[str, Any]] = []
        self._started = 0.0

    def __enter__(self) -> TupleSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _url(self) -> str | None:
        try:
            targets = json.loads(self._target.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return f"http://{targets[0]['targets'][0]}/metrics"

    def _run(self) -> None:
        url = None
        shown = 0.0
        while not self._stop.wait(SAMPLE_S):
            url = url or self._url()
            if url is None:
                continue
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310
                    text = answer.read().decode("utf-8")
            except OSError:  # the run just ended (endpoint closed)
                continue
            counts: dict[str, int] = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "sr3_tuples_total":
                        name = sample.labels.get("component", "?")
                        counts[name] = counts.get(name, 0) + int(sample.value)
            t_s = round(time.monotonic() - self._started, 2)
            self.samples.append({"t_s": t_s, "tuples": counts})
            if t_s - shown >= _PROGRESS_S:
                shown = t_s
                self._progress(
                    f"{self._engine}: {t_s:.0f} s, {sum(counts.values())} tuples"
                )


def per_second(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return tuples/s between samples, per component, and their peak."""
    times: list[float] = []
    rates: dict[str, list[float]] = {}
    for prev, cur in zip(samples, samples[1:], strict=False):
        dt = cur["t_s"] - prev["t_s"]
        if dt <= 0:
            continue
        times.append(cur["t_s"])
        for name in cur["tuples"]:
            delta = cur["tuples"][name] - prev["tuples"].get(name, 0)
            rates.setdefault(name, [0.0] * (len(times) - 1)).append(
                round(max(delta, 0) / dt, 1)
            )
        for series in rates.values():
            if len(series) < len(times):
                series.append(0.0)
    peak = {name: max(series) for name, series in rates.items() if series}
    return {"t_s": times, "per_s": rates, "peak_per_s": peak}
