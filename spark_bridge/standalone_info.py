"""What a standalone cluster records, and how its JVMs are recognised by pid.

:class:`ClusterInfo` is the content of ``standalone.json``; :func:`command_line`
and :func:`has_pair` read a live process's argv so that a pid is only signalled
after its command line proves it is this cluster's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["ClusterInfo", "command_line", "has_pair", "replace_pids"]


def command_line(pid: int) -> list[str]:
    """Return the argv of a live, non-zombie ``pid``, else []."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    if stat.rpartition(")")[2].split()[0] in ("Z", "X"):
        return []
    return raw.decode("utf-8", errors="replace").split("\0")


def has_pair(argv: list[str], flag: str, value: str) -> bool:
    """Return whether ``argv`` holds ``flag`` directly followed by ``value``."""
    return any(a == flag and b == value for a, b in zip(argv, argv[1:], strict=False))


@dataclass(frozen=True)
class ClusterInfo:
    """What ``standalone.json`` records: enough to find and stop the cluster.

    Attributes:
        master: The master URL, ``spark://127.0.0.1:PORT``.
        master_port: The master's RPC port.
        master_webui_port: The master's web UI port (``/json/`` lists workers).
        worker_port: The worker's RPC port (executors name it in --worker-url).
        worker_webui_port: The worker's web UI port.
        work_dir: The worker's work dir.
        master_pid: The master JVM's pid (None once stopped).
        worker_pid: The worker JVM's pid (None once stopped).
    """

    master: str
    master_port: int
    master_webui_port: int
    worker_port: int
    worker_webui_port: int
    work_dir: str
    master_pid: int | None = None
    worker_pid: int | None = None

    @property
    def master_webui(self) -> str:
        """The master's web UI, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.master_webui_port}"

    @property
    def worker_url(self) -> str:
        """How the worker's executors name it (``--worker-url``)."""
        return f"spark://Worker@127.0.0.1:{self.worker_port}"


def replace_pids(info: ClusterInfo, **pids: int | None) -> ClusterInfo:
    """Return ``info`` with the given pids (``master_pid``, ``worker_pid``) set."""
    return ClusterInfo(**{**asdict(info), **pids})
