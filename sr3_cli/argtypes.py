"""Argument types of the ``sr3`` command: numbers checked while parsing.

Each is an ``argparse`` ``type=``: a value out of range is a usage error naming
the option's allowed range, before any lab, ZooKeeper or ring node is touched.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "MAX_NAME_BYTES",
    "at_least",
    "fraction",
    "int_between",
    "nonempty",
    "positive_seconds",
    "tcp_port",
]


def at_least(low: int) -> Callable[[str], int]:
    """Return a type accepting integers ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            msg = f"{text!r} is not a whole number >= {low}"
            raise argparse.ArgumentTypeError(msg)
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def int_between(low: int, high: int) -> Callable[[str], int]:
    """Return a type accepting integers in ``low..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            msg = f"{text!r} is not a whole number in {low}..{high}"
            raise argparse.ArgumentTypeError(msg)
        return value

    parse.__name__ = f"integer in {low}..{high}"
    return parse


#: Longest name in UTF-8 bytes: an owner goes into every shard id, which a
#: node takes up to 4096 bytes long, and into znode names.
MAX_NAME_BYTES = 1024


def nonempty(text: str) -> str:
    """A name (an owner, topology, component or node id): UTF-8 text, not empty.

    At most :data:`MAX_NAME_BYTES` bytes, so a shard id made of it fits a frame.
    """
    if not text:
        msg = "must not be empty; give a name"
        raise argparse.ArgumentTypeError(msg)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # bytes of another encoding, as sys.argv keeps them
        shown = text.encode("utf-8", "surrogateescape")
        msg = f"{shown!r} is not UTF-8 text; give the name in UTF-8"
        raise argparse.ArgumentTypeError(msg) from None
    if size > MAX_NAME_BYTES:
        msg = (
            f"a name of {size} bytes is too long; use at most {MAX_NAME_BYTES} "
            "bytes (UTF-8)"
        )
        raise argparse.ArgumentTypeError(msg)
    return text


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def positive_seconds(text: str) -> float:
    """Seconds, a finite number ``> 0``."""
    value = _finite(text)
    if value is None or value <= 0:
        msg = f"{text!r} is not a number of seconds > 0"
        raise argparse.ArgumentTypeError(msg)
    return value


def fraction(text: str) -> float:
    """A number in ``0..1``."""
    value = _finite(text)
    if value is None or not 0 <= value <= 1:
        msg = f"{text!r} is not a fraction in 0..1"
        raise argparse.ArgumentTypeError(msg)
    return value


def tcp_port(text: str) -> int:
    """A TCP port ``0..65535`` (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        msg = f"{text!r} is not a TCP port (0..65535; 0 picks a free one)"
        raise argparse.ArgumentTypeError(msg)
    return value
