"""Terminal output for the CLI: tables, JSON, step timers and progress bars.

Progress goes to stderr and only when it is a terminal, so ``--json`` output on
stdout stays machine-readable.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = [
    "JSON_HELP",
    "Progress",
    "emit_error",
    "emit_json",
    "format_bytes",
    "step",
    "table",
]

#: Help of every ``--json`` option: the error object is part of the contract.
JSON_HELP = (
    "print JSON on stdout; on failure it is "
    '{"error": {"type": ..., "message": ..., "exit_code": ...}}'
)


def format_bytes(n: float) -> str:
    """Return ``n`` bytes as a short human string (``1.5 MB``)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def emit_json(obj: Any, out: TextIO | None = None) -> None:
    """Print ``obj`` as indented JSON on stdout."""
    print(
        json.dumps(obj, indent=2, sort_keys=True, default=str), file=out or sys.stdout
    )


def emit_error(kind: str, message: str, exit_code: int) -> None:
    """Print the ``--json`` error object on stdout."""
    emit_json({"error": {"type": kind, "message": message, "exit_code": exit_code}})


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Return a plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


@contextmanager
def step(title: str, *, quiet: bool = False) -> Iterator[None]:
    """Print ``title``, run the block, then print how long it took."""
    started = time.perf_counter()
    if not quiet:
        print(f"==> {title}", flush=True)
    yield
    if not quiet:
        print(f"    done in {time.perf_counter() - started:.2f}s", flush=True)


class Progress:
    """A byte-count progress bar on stderr (silent when stderr is not a terminal)."""

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None) -> None:
        self._label = label
        self._total = max(total, 1)
        self._done = 0
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty()
        self._started = time.perf_counter()
        self._last = 0.0

    def __call__(self, n: int) -> None:
        """Add ``n`` bytes and redraw at most ten times a second."""
        self._done += n
        now = time.perf_counter()
        if self._enabled and (now - self._last > 0.1 or self._done >= self._total):
            self._last = now
            frac = min(self._done / self._total, 1.0)
            rate = self._done / max(now - self._started, 1e-9)
            bar = "#" * int(frac * 30)
            self._stream.write(
                f"\r{self._label} [{bar:<30}] {frac:6.1%} "
                f"{format_bytes(self._done)} {format_bytes(rate)}/s"
            )
            self._stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self._enabled:
            self._stream.write("\n")
            self._stream.flush()
