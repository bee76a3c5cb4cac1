"""HeldRecords: warnings held until a command ends, shown once or dropped."""

from __future__ import annotations

import io
import logging

from sr3_cli.logs import HeldRecords


def record(
    message: str, *args: object, level: int = logging.WARNING
) -> logging.LogRecord:
    return logging.LogRecord("sr3.x", level, __file__, 1, message, args, None)


def test_a_finished_command_shows_each_distinct_message_once() -> None:
    held = HeldRecords()
    for node in ("node-1", "node-2", "node-1"):
        held.handle(record("write to %s failed", node))
    held.handle(record("boom", level=logging.ERROR))
    out = io.StringIO()
    held.finish(show=True, stream=out)
    assert out.getvalue().splitlines() == [
        "sr3: warning: write to node-1 failed (2 times)",
        "sr3: warning: write to node-2 failed",
        "sr3: error: boom",
    ]
    again = io.StringIO()
    held.finish(show=True, stream=again)  # forgotten once shown
    assert again.getvalue() == ""


def test_a_failed_command_drops_what_it_held() -> None:
    held = HeldRecords()
    held.handle(record("retrying"))
    out = io.StringIO()
    held.finish(show=False, stream=out)
    assert out.getvalue() == ""


def test_a_flood_of_distinct_messages_is_counted_not_kept() -> None:
    held = HeldRecords(limit=2)
    for n in range(5):
        held.handle(record("shard %d lost", n))
    held.handle(record("bad %s %s", "one"))  # a broken format string still shows
    out = io.StringIO()
    held.finish(show=True, stream=out)
    assert out.getvalue().splitlines() == [
        "sr3: warning: shard 0 lost",
        "sr3: warning: shard 1 lost",
        "sr3: warning: 4 more log messages; rerun with -v to see them as they happen",
    ]
