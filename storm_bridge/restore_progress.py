"""When a restored stateful task processed its first tuple, and had all its state.

A lazy restore (``sr3.recovery.lazy``) makes a task ready before its state
arrived: it processes at once and fetches key groups as tuples need them. The
run report shows that a task did so: :class:`RestoreProgress` turns the task's
three moments (ready, first tuple processed, whole state arrived) into the
params of :data:`~topology_api.barriers.LOADED_METRIC`, sent each time one of
the last two becomes known, and never before the task reported its restore
(the state may finish arriving on a background thread before that).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from backend.lazy import LoadStats

__all__ = ["RestoreProgress"]


class RestoreProgress:
    """A restored task's first tuple and state arrival, relative to its readiness.

    Args:
        owner: The task's owner id, named in every report.
        lazy: Whether the state is restored lazily (else it is all there at ready).
    """

    def __init__(self, owner: str, *, lazy: bool) -> None:
        self._owner = owner
        #: Whether the state is still arriving at ready (set once restored).
        self.lazy = lazy
        self._lock = threading.Lock()
        self._ready_at: float | None = None
        self._first_at: float | None = None
        self._loaded_at: float | None = None
        self._stats: LoadStats | None = None
        self.first_pending = True

    @property
    def loading(self) -> bool:
        """Whether the state is restored lazily and has not all arrived yet."""
        with self._lock:
            return self.lazy and self._stats is None

    def ready(self) -> dict[str, Any] | None:
        """The task reported its restore: params to send now, if any arrived."""
        with self._lock:
            self._ready_at = time.monotonic()
            if not self.lazy:
                self._loaded_at = self._ready_at
            return self._params() if self._stats is not None else None

    def loaded(self, stats: LoadStats) -> dict[str, Any] | None:
        """Every shard arrived (any thread): params to send, None before ready."""
        with self._lock:
            self._loaded_at = time.monotonic()
            self._stats = stats
            return None if self._ready_at is None else self._params()

    def first_tuple(self) -> dict[str, Any] | None:
        """The task processed its first tuple: params to send (None before ready)."""
        with self._lock:
            self.first_pending = False
            self._first_at = time.monotonic()
            return None if self._ready_at is None else self._params()

    def _params(self) -> dict[str, Any]:
        ready = self._ready_at or 0.0
        params: dict[str, Any] = {
            "owner": self._owner,
            "lazy": self.lazy,
            "first_tuple_s": _since(ready, self._first_at),
            "state_loaded_s": _since(ready, self._loaded_at),
        }
        stats = self._stats
        if stats is not None:
            params["loaded_bytes"] = stats.bytes_read
            params["on_demand_shards"] = stats.on_demand
            params["loaded_shards"] = stats.shards
            if stats.transfer:  # planned in the background: named only now
                params["transfer"] = stats.transfer
                params["reason"] = stats.reason
        return params


def _since(ready: float, at: float | None) -> float | None:
    """Seconds from ``ready`` to ``at`` (0 when it was before), None if not yet."""
    return None if at is None else round(max(0.0, at - ready), 6)
