"""The value types of ``sr3.*`` keys: sizes, durations, names, ZooKeeper addresses.

Each :class:`Kind` turns a raw value (JSON from a Storm conf, a string from a
Spark conf or an environment variable) into a typed one, or raises
``ValueError`` saying what the value is not; :class:`sr3.config_keys.Key` adds
the key, the value and the accepted values to make the user's error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sr3.errors import ConfigError

__all__ = [
    "BOOL",
    "FLOAT",
    "INT",
    "MAX_DURATION_S",
    "NAMES",
    "REGEX",
    "SECONDS",
    "SIZE",
    "STORM_SECONDS",
    "TEXT",
    "TOPIC_NAMES",
    "Kind",
    "check_zk_hosts",
    "chroot_problem",
    "parse_size",
]

#: Longest duration a ``*.s`` key takes (about 11.6 days): ZooKeeper carries a
#: session timeout as int32 milliseconds, and sockets and waits overflow time_t
#: long before inf.
MAX_DURATION_S: Final = 1_000_000.0
_SIZE_UNITS: Final = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
}
#: Sizes are byte counts carried as signed 64-bit integers (msgpack, ZooKeeper).
_MAX_SIZE: Final = 2**63 - 1


class _BadValueError(ValueError):
    """A raw value is not of its key's type; the message says what it is not."""


def parse_size(text: str | int) -> int:
    """Parse ``200MB``, ``1GiB``, ``4096`` into bytes.

    Raises:
        ConfigError: the text is not a size.
    """
    if isinstance(text, int):
        return text
    raw = text.strip().upper().replace(" ", "")
    digits = raw.rstrip("KMGIB")
    unit = raw[len(digits) :]
    try:
        value = float(digits)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0 or unit not in _SIZE_UNITS:
        msg = f"{text!r} is not a size; write a number and a unit, as 200MB or 1GiB"
        raise ConfigError(msg)
    size = value * _SIZE_UNITS[unit]
    if size > _MAX_SIZE:
        msg = f"{text!r} is too large a size; sizes stop below 8 EiB (2**63 bytes)"
        raise ConfigError(msg)
    return int(size)


def check_zk_hosts(hosts: str) -> str:
    """Return ``hosts`` if it is a ``HOST:PORT[,HOST:PORT]`` list, else raise.

    The port may be left out (ZooKeeper's 2181); an IPv6 host goes in brackets,
    as ``[::1]:2181``; a chroot suffix (``zk1:2181,zk2:2181/app``, as kazoo and
    ZooKeeper's own clients take it) is left to them. An empty string (start an
    embedded server) is accepted.

    Raises:
        ConfigError: an entry has no host, or a port that is not 1..65535.
    """
    servers = hosts.split("/", 1)[0]
    for entry in servers.split(",") if hosts.strip() else ():
        item = entry.strip()
        host, port = item, ""
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else rest
        elif ":" in item:
            host, port = item.split(":", 1)
        ok = (
            bool(host)
            and all(c not in host for c in " /[]")
            and (port == "" or (port.isdigit() and 1 <= int(port) <= 65535))
        )
        if not ok or ":" in port:
            msg = (
                f"ZooKeeper address {item!r} in {hosts!r} is not HOST:PORT; write "
                "sr3.zk.hosts (or --zk) as zk1:2181,zk2:2181 with ports 1..65535"
            )
            raise ConfigError(msg)
    return hosts


def chroot_problem(path: str) -> str | None:
    """Say why ZooKeeper would refuse ``path`` as a chroot, or None if it takes it."""
    if not path.startswith("/") or path.endswith("/"):
        return "is not an absolute path without a trailing slash"
    if any(part in ("", ".", "..") for part in path.split("/")[1:]) or any(
        c <= "\x1f"
        or "\x7f" <= c <= "\x9f"
        or "\ud800" <= c <= "\uf8ff"
        or "\ufff0" <= c <= "\uffff"
        for c in path
    ):
        return "is invalid: ZooKeeper refuses this path"
    return None


def _to_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    msg = "is not a whole number"
    raise _BadValueError(msg)


def _to_float(value: object) -> float:
    number: float = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            pass
    if math.isnan(number):
        msg = "is not a number"
        raise _BadValueError(msg)
    return number


def _to_storm_float(value: object) -> float:
    # Storm's conf validation takes JSON numbers only: "2" is refused on a
    # real cluster, so the local one refuses it too
    if not isinstance(value, int | float) or isinstance(value, bool):
        msg = "is not a JSON number (Storm's conf validation takes no strings)"
        raise _BadValueError(msg)
    return _to_float(value)


def _to_size(value: object) -> int:
    if isinstance(value, int | str) and not isinstance(value, bool):
        try:
            return parse_size(value)
        except ConfigError as exc:
            big = "too large" in str(exc)
            msg = "is too large a size" if big else _NOT_A_SIZE
            raise _BadValueError(msg) from None
    raise _BadValueError(_NOT_A_SIZE)


_NOT_A_SIZE: Final = "is not a size (a number and a unit, as 200MB or 1GiB)"


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    msg = "is not a boolean"
    raise _BadValueError(msg)


def _to_text(value: object) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    msg = "is not text"
    raise _BadValueError(msg)


def _to_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",")]
    elif isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        names = [name.strip() for name in value]
    else:
        msg = "is not a list of names nor a comma-separated string"
        raise _BadValueError(msg)
    if not names or not all(names):
        msg = "names an empty field"
        raise _BadValueError(msg)
    return tuple(names)


def _to_topic_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raw: list[object] = list(value.split(","))
    elif isinstance(value, list | tuple):
        raw = list(value)
    else:
        msg = "is not a list of names nor a comma-separated string"
        raise _BadValueError(msg)
    return tuple(str(t).strip() for t in raw if str(t).strip())


def _to_regex(value: object) -> str:
    text = _to_text(value)
    try:
        re.compile(text)
    except re.error as exc:
        msg = f"is not a regular expression ({exc})"
        raise _BadValueError(msg) from exc
    return text


@dataclass(frozen=True)
class Kind:
    """A value type: its name in the docs, and how a raw value becomes one.

    Attributes:
        name: What the docs call it (``integer``, ``seconds``...).
        convert: Raw value to typed value; raises ``ValueError`` saying what the
            value is not (``is not a whole number``).
    """

    name: str
    convert: Callable[[object], Any]


INT: Final = Kind("integer", _to_int)
FLOAT: Final = Kind("number", _to_float)
SECONDS: Final = Kind("seconds", _to_float)
STORM_SECONDS: Final = Kind("seconds (JSON number)", _to_storm_float)
SIZE: Final = Kind("size", _to_size)
BOOL: Final = Kind("boolean", _to_bool)
TEXT: Final = Kind("text", _to_text)
REGEX: Final = Kind("regular expression", _to_regex)
NAMES: Final = Kind("names", _to_names)
TOPIC_NAMES: Final = Kind("names", _to_topic_names)
