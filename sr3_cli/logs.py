"""How ``sr3`` shows the library's log records: live, or held until the outcome.

By default a command holds the WARNING and ERROR records the library logs on
its way (a replica write that failed, a retry, a member znode skipped) until
it ends. A command that fails prints one ``sr3: error:`` line saying why, and
the records held are dropped: they are that same failure told piecemeal. A
command that ends otherwise (success, or a check that failed with exit 1)
shows each distinct message once after its output, as ``sr3: warning: ...``.
``-v`` / ``--verbose`` or an explicit ``--log-level`` shows records live, with
time and logger, as ``sr3 node`` and ``sr3 run`` always do: they serve or run
for long, and their logs are what an operator follows.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["HeldRecords", "LIVE_FORMAT", "configure"]

#: Format of records shown live.
LIVE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Distinct messages kept; more are counted, not kept (a long run of retries).
_MAX_HELD = 50
#: Commands whose records always go live: they serve, or run for long.
_LIVE_COMMANDS = frozenset({"compare", "node", "run"})
#: Commands whose records are dropped unless -v: they cause failures on purpose.
_SILENT_COMMANDS = frozenset({"chaos"})


class HeldRecords(logging.Handler):
    """Holds WARNING and ERROR records of one command until it ends.

    Args:
        limit: Distinct messages kept; later new ones are only counted.
    """

    def __init__(self, limit: int = _MAX_HELD) -> None:
        super().__init__(logging.WARNING)
        self._limit = limit
        self._held: dict[tuple[str, str], int] = {}
        self._more = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Hold ``record``'s message (a repeated one is counted)."""
        try:
            key = (record.levelname.lower(), record.getMessage())
        except (TypeError, ValueError):  # a bad format string: show it as is
            key = (record.levelname.lower(), str(record.msg))
        if key in self._held:
            self._held[key] += 1
        elif len(self._held) < self._limit:
            self._held[key] = 1
        else:
            self._more += 1

    def finish(self, *, show: bool, stream: TextIO | None = None) -> None:
        """Print what is held (when ``show``) on ``stream`` (stderr), then forget it."""
        out = stream or sys.stderr
        if show:
            for (level, message), count in self._held.items():
                times = f" ({count} times)" if count > 1 else ""
                print(f"sr3: {level}: {message}{times}", file=out)
            if self._more:
                print(
                    f"sr3: warning: {self._more} more log messages; rerun with -v "
                    "to see them as they happen",
                    file=out,
                )
        self._held.clear()
        self._more = 0


def configure(
    command: str, *, log_level: str | None, verbose: bool
) -> HeldRecords | None:
    """Set up logging for ``command``; return the handler holding its records.

    None means records go live to stderr: ``-v`` (INFO), an explicit
    ``--log-level``, or a command in which they always do (``node``, ``run``).
    """
    name = log_level or ("INFO" if verbose else "WARNING")
    level = getattr(logging, name.upper(), logging.WARNING)
    if level > logging.INFO and command != "node":
        # kazoo logs every failed connect attempt; the error says it once
        logging.getLogger("kazoo").setLevel(logging.ERROR)
    if log_level is not None or verbose or command in _LIVE_COMMANDS:
        logging.basicConfig(level=level, format=LIVE_FORMAT, stream=sys.stderr)
        return None
    if command in _SILENT_COMMANDS:
        # a campaign's faults make every task log; its report says what matters
        logging.getLogger().addHandler(logging.NullHandler())
        return None
    held = HeldRecords()
    root = logging.getLogger()
    root.addHandler(held)
    root.setLevel(logging.WARNING)
    return held
