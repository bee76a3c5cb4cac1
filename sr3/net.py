"""Port helpers shared by every daemon launcher: ZooKeeper, Kafka, Storm, Spark.

A daemon's port is kept when it restarts (ZooKeeper, a Kafka broker, a Storm
worker slot), and its clients keep reconnecting to it while it is down. So the
ports handed out here lie outside the kernel's ephemeral range, from which
every ``bind(("", 0))`` and every outgoing connection takes its local port:

- no other process's ``bind(0)`` can take the port while its daemon restarts
  (the lab's ZooKeeper then had to move to a new port, and its clients lost it);
- a client reconnecting to a stopped daemon cannot connect to itself: Linux
  joins a connect to ``127.0.0.1:P`` whose local port is also ``P`` to itself
  (measured here: one loop of refused connects to an even ephemeral port
  reached itself after 12,000 to 16,000 attempts).
"""

from __future__ import annotations

import errno
import random
import socket
import threading
from pathlib import Path

__all__ = ["bindable", "ephemeral_ports", "free_port"]

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default ``ip_local_port_range``, used when it cannot be read.
_DEFAULT_EPHEMERAL = range(32768, 61000)
#: The lowest port handed out: well-known services (2181, 8080, 9092) sit below.
_LOWEST = 10000
#: Random ports tried before falling back to one the kernel picks.
_ATTEMPTS = 200
#: Ports this process handed out: two launchers in one process never get the
#: same port in the window between choosing it and their daemon binding it.
_handed_out: set[int] = set()
_lock = threading.Lock()


def ephemeral_ports() -> range:
    """Return the kernel's ephemeral (outgoing) port range."""
    try:
        low, high = (int(v) for v in _EPHEMERAL_RANGE.read_text("ascii").split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return range(low, high + 1)


def _server_ports() -> list[range]:
    ephemeral = ephemeral_ports()
    spans = [range(_LOWEST, ephemeral.start), range(ephemeral.stop, 65536)]
    return [span for span in spans if len(span) > 0]


def _nth(spans: list[range], index: int) -> int:
    """Return the ``index``-th port of ``spans`` taken end to end."""
    for span in spans:
        if index < len(span):
            return span[index]
        index -= len(span)
    msg = f"port index {index} is past the spans {spans}"
    raise IndexError(msg)


def bindable(host: str, port: int, *, ignore_time_wait: bool = False) -> bool:
    """Whether a TCP server could bind ``host``:``port`` now.

    Args:
        host: Address to bind ("0.0.0.0" for a server listening on every address).
        port: The port.
        ignore_time_wait: Bind with SO_REUSEADDR, as ZooKeeper does, so TIME_WAIT
            leftovers of an earlier run do not count as taken.

    Raises:
        OSError: ``host`` is not an address of this machine.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if ignore_time_wait:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port free on ``host`` now, outside the ephemeral range.

    Another process may take it before the caller binds it; launchers that
    need certainty check again when their daemon starts. When no port outside
    the ephemeral range is free (or the range covers every port), the kernel
    picks one.

    Raises:
        OSError: ``host`` is not an address of this machine.
    """
    spans = _server_ports()
    total = sum(len(span) for span in spans)
    chooser = random.SystemRandom()
    for _ in range(_ATTEMPTS if total else 0):
        port = _nth(spans, chooser.randrange(total))
        with _lock:
            if port in _handed_out:
                continue
        if bindable(host, port):
            with _lock:
                _handed_out.add(port)
            return port
    return _kernel_port(host)
