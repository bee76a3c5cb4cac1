"""Port helpers shared by every daemon launcher: ZooKeeper, Kafka, Storm, Spark."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port free on ``host`` now (bound to port 0, then released).

    Another process may take it before the caller binds it; launchers that
    need certainty check again when their daemon starts.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
