"""Latency percentiles: one shape for every engine's report.

``{"p50", "p90", "p99", "max"}`` in milliseconds, rounded to 0.1 ms (None
with no sample). The Spark engine reports its micro-batches' durations this
way and the local Storm cluster its tuple trees' complete latency (spout emit
to the ack of the whole tree, Storm's "complete latency"); ``sr3 compare``
plots and tabulates both.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

__all__ = ["LatencySample", "percentiles"]

#: How many latencies a :class:`LatencySample` keeps (a uniform sample beyond).
SAMPLE_SIZE: Final = 10_000


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Return p50, p90, p99 and max of ``values`` (ms), nearest rank."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(ordered[-1], 1),
    }


class LatencySample:
    """Latencies of a run in bounded memory: a uniform reservoir sample.

    The first ``size`` latencies are kept; then each new one replaces a kept
    one with probability ``size / count`` (Vitter's algorithm R), so the
    percentiles are those of a uniform sample of the whole run. The maximum
    and the count are exact.
    """

    def __init__(self, size: int = SAMPLE_SIZE, seed: int = 0) -> None:
        self._size = size
        self._kept: list[float] = []
        self._rng = random.Random(seed)
        self.count = 0
        self.max_ms = 0.0

    def add(self, ms: float) -> None:
        """Record one latency, in milliseconds."""
        self.count += 1
        self.max_ms = max(self.max_ms, ms)
        if len(self._kept) < self._size:
            self._kept.append(ms)
            return
        slot = self._rng.randrange(self.count)
        if slot < self._size:
            self._kept[slot] = ms

    def summary(self) -> dict[str, float | int | None]:
        """Return the percentiles (ms), the exact max and how many were recorded."""
        found: dict[str, float | int | None] = dict(percentiles(self._kept))
        if self.count:
            found["max"] = round(self.max_ms, 1)
        found["count"] = self.count
        return found
