"""A standalone cluster's JVMs as processes: start, await, recognise and stop them.

:func:`master_command` and :func:`worker_command` are the daemons' command
lines and :func:`spawn_daemon` starts one through ``spark-class`` with its
log; :func:`wait_alive` polls the master's ``/json/`` state until it lists the
daemon ALIVE (:func:`worker_registered` says when a worker is). A pid is
recognised by its command line (:func:`~spark_bridge.standalone_info.command_line`):
:func:`is_master` and :func:`is_worker` check a daemon's main class and
options, :func:`worker_executors` and :func:`driver_executors` find executor
JVMs. :func:`terminate` stops a pid with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from spark_bridge.spark_install import StandaloneClusterError
from spark_bridge.standalone_info import (
    ClusterInfo,
    DaemonSpot,
    WorkerInfo,
    command_line,
    has_pair,
)

__all__ = [
    "LOG_TAIL_LINES",
    "driver_executors",
    "file_tail",
    "is_master",
    "is_worker",
    "master_command",
    "spawn_daemon",
    "terminate",
    "wait_alive",
    "worker_command",
    "worker_executors",
    "worker_registered",
]

logger = logging.getLogger(__name__)

_MASTER: Final = "org.apache.spark.deploy.master.Master"
_WORKER: Final = "org.apache.spark.deploy.worker.Worker"
_EXECUTOR: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: Lines of a daemon's log quoted when it does not start.
LOG_TAIL_LINES: Final = 30
_POLL_S: Final = 0.1
_PROBE_TIMEOUT_S: Final = 1.0


def master_command(spark_class: str, info: ClusterInfo) -> list[str]:
    """Return the master's command line: ``spark-class``, main class, options."""
    return [spark_class, _MASTER, "--host", info.master_host,
            "--port", str(info.master_port),
            "--webui-port", str(info.master_webui_port)]  # fmt: skip


def worker_command(
    spark_class: str, master: str, worker: WorkerInfo, *, cores: int, memory: str
) -> list[str]:
    """Return a worker's command line: ``spark-class``, main class, options."""
    return [spark_class, _WORKER, master, "--host", worker.host,
            "--port", str(worker.port), "--cores", str(cores),
            "--memory", memory,
            "--webui-port", str(worker.webui_port),
            "--work-dir", worker.work_dir]  # fmt: skip


def is_master(pid: int, port: str) -> bool:
    """Return whether ``pid`` is a live master JVM with RPC port ``port``."""
    argv = command_line(pid)
    return _MASTER in argv and has_pair(argv, "--port", port)


def is_worker(pid: int, work_dirs: Collection[str]) -> bool:
    """Return whether ``pid`` is a live worker JVM with one of ``work_dirs``."""
    argv = command_line(pid)
    return _WORKER in argv and any(has_pair(argv, "--work-dir", d) for d in work_dirs)


def file_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of the log at ``path`` ("" if none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def spawn_daemon(  # noqa: PLR0913 (keyword-only options)
    argv: Sequence[str],
    *,
    spot: DaemonSpot,
    env: Mapping[str, str],
    log: Path,
    cwd: Path,
    detached: bool,
    run: Sequence[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one daemon through ``spark-class`` (``argv[0]``), its output to ``log``.

    Its environment is this process's plus ``env``, with ``SPARK_HOME`` (from
    ``argv[0]``) and ``SPARK_LOCAL_IP`` (the spot's host); the executors a
    worker launches inherit it. ``detached`` starts it in its own session.
    ``run``, when given, is started instead of ``argv``: a wrapper that execs
    that same command (the netns lab's provisioned start scripts).
    """
    full_env = {**os.environ, **env}
    full_env["SPARK_HOME"] = argv[0].rsplit("/bin/", 1)[0]
    full_env["SPARK_LOCAL_IP"] = spot.host
    with log.open("ab") as out:
        return subprocess.Popen(  # noqa: S603 (spark-class, our arguments)
            [*spot.prefix, *(argv if run is None else run)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=detached,
        )


def wait_alive(  # noqa: PLR0913 (keyword-only options)
    daemon: str,
    proc: subprocess.Popen[bytes],
    *,
    url: str,
    ready: Callable[[dict[str, Any]], bool],
    timeout_s: float,
    log: Path,
) -> None:
    """Wait until the master's ``/json/`` state at ``url`` is ``ready``.

    Raises:
        StandaloneClusterError: ``proc`` exited, or the state was not ready
            within ``timeout_s``; the message quotes the tail of ``log``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            msg = (
                f"Spark {daemon} (pid {proc.pid}) exited with code {proc.returncode} "
                f"while starting; {log} ends with:\n"
                f"{file_tail(log)}"
            )
            raise StandaloneClusterError(msg)
        try:
            with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT_S) as reply:  # noqa: S310 (the master's http)
                state = json.loads(reply.read())
        except (OSError, ValueError):
            state = {}
        if ready(state):
            return
        if time.monotonic() > deadline:
            msg = (
                f"Spark {daemon} (pid {proc.pid}) was not ALIVE at {url} within "
                f"{timeout_s} s; {log} ends with:\n"
                f"{file_tail(log)}"
            )
            raise StandaloneClusterError(msg)
        time.sleep(_POLL_S)


def worker_registered(worker: WorkerInfo) -> Callable[[dict[str, Any]], bool]:
    """Return whether the master's ``/json/`` state lists ``worker`` ALIVE."""

    def ready(state: dict[str, Any]) -> bool:
        return any(
            w.get("host") == worker.host
            and w.get("port") == worker.port
            and w.get("state") == "ALIVE"
            for w in state.get("workers", [])
        )

    return ready


def worker_executors(worker_urls: Collection[str]) -> list[int]:
    """Return the pids of the executor JVMs the workers at ``worker_urls`` launched.

    An executor is a ``CoarseGrainedExecutorBackend`` whose ``--worker-url``
    is one of them, found by scanning ``/proc/*/cmdline``.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = command_line(int(entry.name))
        if _EXECUTOR in argv and any(
            has_pair(argv, "--worker-url", u) for u in worker_urls
        ):
            found.append(int(entry.name))
    return sorted(found)


def driver_executors(driver_port: int) -> dict[str, int]:
    """Return ``{executor id: pid}`` of this machine's executors of one driver.

    An application's executors are the ``CoarseGrainedExecutorBackend`` JVMs
    whose ``--driver-url`` ends with the port of its driver
    (``spark.driver.port``), on any cluster whose workers run on this machine
    (also in another network namespace: they share ``/proc``).
    """
    suffix = f":{driver_port}"
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = command_line(int(entry.name))
        if _EXECUTOR not in argv:
            continue
        pairs = dict(zip(argv, argv[1:], strict=False))
        if pairs.get("--driver-url", "").endswith(suffix) and "--executor-id" in pairs:
            found[pairs["--executor-id"]] = int(entry.name)
    return found


def terminate(
    pid: int, *, running: Callable[[int], bool], stop_timeout_s: float
) -> None:
    """Stop ``pid`` if ``running(pid)``: SIGTERM, then SIGKILL after the grace.

    Waits up to 5 s more for it to be gone: a pid that is not our child is
    reaped by its parent.
    """
    if not running(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + stop_timeout_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if running(pid):
        logger.warning("Spark pid %s ignored SIGTERM; killing", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while running(pid) and time.monotonic() < deadline + 5.0:
        time.sleep(0.05)  # not our child: its parent reaps it
