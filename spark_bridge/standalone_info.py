"""What a standalone cluster records, and how its JVMs are recognised by pid.

:class:`ClusterInfo` is the content of ``standalone.json`` (the master and
each :class:`WorkerInfo`); :class:`DaemonSpot` says where a daemon runs (the
address it binds and announces, and a command prefix such as ``ip netns exec
NS`` that starts it on a netns lab host); :func:`command_line` and
:func:`has_pair` read a live process's argv so that a pid is only signalled
after its command line proves it is this cluster's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "LOOPBACK",
    "ClusterInfo",
    "DaemonSpot",
    "WorkerInfo",
    "command_line",
    "has_pair",
]

#: Where every daemon of a loopback cluster binds.
LOOPBACK = "127.0.0.1"


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
class DaemonSpot:
    """Where one daemon runs.

    Attributes:
        host: The address it binds and announces (``SPARK_LOCAL_IP``,
            ``--host``); default loopback.
        prefix: The command prefix starting it (``ip netns exec NS`` for a
            netns lab host; default none: this namespace).
    """

    host: str = LOOPBACK
    prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerInfo:
    """One worker of the cluster.

    Attributes:
        host: The address it binds (its executors bind it too).
        port: Its RPC port (executors name it in ``--worker-url``).
        webui_port: Its web UI port.
        work_dir: Its work dir (``<app-id>/<exec-id>/stderr``).
        pid: Its JVM's pid (None once stopped).
    """

    host: str
    port: int
    webui_port: int
    work_dir: str
    pid: int | None = None

    @property
    def url(self) -> str:
        """How the worker's executors name it (``--worker-url``)."""
        return f"spark://Worker@{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterInfo:
    """What ``standalone.json`` records: enough to find and stop the cluster.

    Attributes:
        master: The master URL, ``spark://HOST:PORT``.
        master_port: The master's RPC port.
        master_webui_port: The master's web UI port (``/json/`` lists workers).
        workers: Each worker (one on a loopback cluster).
        master_host: The address the master binds.
        master_pid: The master JVM's pid (None once stopped).
    """

    master: str
    master_port: int
    master_webui_port: int
    workers: tuple[WorkerInfo, ...] = field(default_factory=tuple)
    master_host: str = LOOPBACK
    master_pid: int | None = None

    @property
    def master_webui(self) -> str:
        """The master's web UI, ``http://HOST:PORT``."""
        return f"http://{self.master_host}:{self.master_webui_port}"

    @property
    def worker_pid(self) -> int | None:
        """The first worker's pid (the only one of a loopback cluster)."""
        return self.workers[0].pid if self.workers else None

    @property
    def work_dir(self) -> str:
        """The first worker's work dir."""
        return self.workers[0].work_dir if self.workers else ""

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-able content of ``standalone.json``."""
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ClusterInfo:
        """Read ``standalone.json``; one written before multi-worker clusters too.

        Raises:
            TypeError, KeyError: it does not describe a cluster.
        """
        raw = dict(raw)
        if "workers" not in raw:  # one loopback worker, flat
            raw["workers"] = [
                {
                    "host": LOOPBACK,
                    "port": raw.pop("worker_port"),
                    "webui_port": raw.pop("worker_webui_port"),
                    "work_dir": raw.pop("work_dir"),
                    "pid": raw.pop("worker_pid", None),
                }
            ]
        workers = tuple(WorkerInfo(**w) for w in raw.pop("workers"))
        return cls(workers=workers, **raw)

    def with_master_pid(self, pid: int | None) -> ClusterInfo:
        """Return this info with the master's pid set."""
        return replace(self, master_pid=pid)

    def with_worker_pid(self, index: int, pid: int | None) -> ClusterInfo:
        """Return this info with worker ``index``'s pid set."""
        workers = list(self.workers)
        workers[index] = replace(workers[index], pid=pid)
        return replace(self, workers=tuple(workers))

    def stopped(self) -> ClusterInfo:
        """Return this info with no pid recorded."""
        workers = tuple(replace(w, pid=None) for w in self.workers)
        return replace(self, master_pid=None, workers=workers)
