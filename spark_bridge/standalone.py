"""A Spark standalone cluster (a master, its workers) from the pip pyspark.

The pip package has no ``sbin/start-master.sh``, so both daemons are started
with ``$SPARK_HOME/bin/spark-class``, which ``exec``s java: the pids we get are
the JVMs'. Layout of the cluster's root dir::

    standalone.json   url, ports, pids and work dir (written by start())
    master.log        the master's stdout and stderr
    worker.log        the (first) worker's stdout and stderr; worker2.log, ...
    work/             the (first) worker's work dir: work/<app-id>/<executor-id>/
                      stderr; work2/, ... for the others

By default every daemon binds 127.0.0.1 and there is one worker. Each daemon
can be given a :class:`~spark_bridge.standalone_info.DaemonSpot` instead: the
address it binds and announces (``--host`` and ``SPARK_LOCAL_IP``, which the
executors a worker launches inherit) and a command prefix (``ip netns exec NS``
on a netns lab host, :mod:`sr3_cli.lab_spark`). A driver reaching such a
cluster must bind an address the workers' hosts reach back
(``SPARK_LOCAL_IP``, from which ``spark.driver.host`` and
``spark.driver.bindAddress`` default).

A cluster started with ``detached=True`` (``sr3 lab up --spark``) outlives this
process; :meth:`StandaloneCluster.attach` rebuilds it from ``standalone.json``
in a later process, to stop it or list its executors. Pids are only ever
signalled after their ``/proc/<pid>/cmdline`` proves they are this cluster's.
One JVM's command line, start, recognition and stop are
:mod:`spark_bridge.standalone_jvms`'s; this module runs the cluster.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from spark_bridge.spark_install import (
    StandaloneClusterError,
    check_java,
    spark_home,
)
from spark_bridge.standalone_info import (
    ClusterInfo,
    DaemonSpot,
    WorkerInfo,
    command_line,
)
from spark_bridge.standalone_jvms import (
    LOG_TAIL_LINES,
    file_tail,
    is_master,
    is_worker,
    master_command,
    spawn_daemon,
    terminate,
    wait_alive,
    worker_command,
    worker_executors,
    worker_registered,
)
from sr3.net import free_port

# StandaloneClusterError lives in spark_bridge.spark_install; it is re-exported
# here because sr3_cli/lab_spark.py imports it from this module.
__all__ = [
    "DaemonSpot",
    "StandaloneCluster",
    "StandaloneClusterError",
]

logger = logging.getLogger(__name__)

_STATE: Final = "standalone.json"


class StandaloneCluster:
    """A Spark standalone master and its workers, as child JVMs.

    Args:
        root: Holds ``standalone.json``, the logs and the worker's ``work/``.
            Created if missing.
        cores: Cores the worker offers (default 2).
        memory: Memory the worker offers, Spark syntax (default ``"2g"``).
        detached: Start the JVMs in their own session so they outlive this
            process (stop them later with ``attach(root).stop()``).
        start_timeout_s: How long :meth:`start` waits for the master, then for
            the worker to be ALIVE (each; default 60 s).
        stop_timeout_s: Grace between SIGTERM and SIGKILL (default 10 s).
        master_at: Where the master runs (default: 127.0.0.1, here).
        workers_at: Where each worker runs, one worker per entry (default: one
            on 127.0.0.1, here); each offers ``cores`` and ``memory``.
        env: Extra environment of the daemons, inherited by the executors the
            worker launches and their Python workers (e.g. ``PYTHONPATH``: in
            standalone mode the driver's ``PYTHONPATH`` does not reach them).
        launch_through: Given a daemon's name (``"master"``, ``"worker"``,
            ``"worker2"``...) and its ``spark-class`` command line, returns the
            command to start instead, one that execs that same command line
            (the netns lab: the wrapper ``vagrant/provision/spark.sh`` writes,
            :mod:`sr3_cli.lab_spark`). Default: the command line itself.
    """

    def __init__(  # noqa: PLR0913 (keyword-only options)
        self,
        root: Path,
        *,
        cores: int = 2,
        memory: str = "2g",
        detached: bool = False,
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
        master_at: DaemonSpot | None = None,
        workers_at: Sequence[DaemonSpot] | None = None,
        env: Mapping[str, str] | None = None,
        launch_through: Callable[[str, list[str]], list[str]] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.launch_through = launch_through
        self.cores = cores
        self.memory = memory
        self.detached = detached
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env = dict(env or {})
        self.master_at = master_at or DaemonSpot()
        self.workers_at = tuple(workers_at or (DaemonSpot(),))
        if not self.workers_at:
            msg = f"a standalone cluster in {self.root} needs at least one worker"
            raise StandaloneClusterError(msg)
        self._info: ClusterInfo | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def __repr__(self) -> str:
        url = self._info.master if self._info else "not started"
        return f"StandaloneCluster({str(self.root)!r}, {url})"

    # --- what it is ------------------------------------------------------------

    @property
    def info(self) -> ClusterInfo:
        """Ports, pids and work dir of the started cluster.

        Raises:
            StandaloneClusterError: not started.
        """
        if self._info is None:
            msg = f"{self!r} is not started; call start() first"
            raise StandaloneClusterError(msg)
        return self._info

    @property
    def url(self) -> str:
        """The master URL for ``--master``: ``spark://HOST:PORT``."""
        return self.info.master

    @property
    def master_pid(self) -> int | None:
        """The master JVM's pid while it runs, else None."""
        pid = self._info.master_pid if self._info else None
        return pid if pid is not None and self._is_master(pid) else None

    @property
    def worker_pid(self) -> int | None:
        """The (first) worker JVM's pid while it runs, else None."""
        pids = self.worker_pids()
        return pids[0] if pids else None

    def worker_pids(self) -> list[int | None]:
        """Each worker JVM's pid while it runs, else None (in worker order)."""
        workers = self._info.workers if self._info else ()
        return [w.pid if w.pid and self._is_worker(w.pid) else None for w in workers]

    @property
    def work_dir(self) -> Path:
        """The first worker's work dir (executors' logs in ``<app-id>/<exec-id>/``)."""
        return self._work_dir(0)

    def _work_dir(self, index: int) -> Path:
        return self.root / ("work" if index == 0 else f"work{index + 1}")

    def log_path(self, daemon: str) -> Path:
        """Return the log of ``"master"`` or ``"worker"`` (``"worker2"``, ...)."""
        return self.root / f"{daemon}.log"

    def log_tail(self, daemon: str, lines: int = LOG_TAIL_LINES) -> str:
        """Return the last ``lines`` lines of a daemon's log ("" if none)."""
        return file_tail(self.log_path(daemon), lines)

    def status(self) -> dict[str, Any]:
        """Return a JSON-able summary: url, web UI, pids (None if dead), executors."""
        info = self.info
        pids = self.worker_pids()
        return {
            "master": info.master,
            "master_webui": info.master_webui,
            "master_pid": self.master_pid,
            "worker_pid": pids[0],
            "workers": [
                {"host": w.host, "port": w.port, "pid": pid, "work_dir": w.work_dir}
                for w, pid in zip(info.workers, pids, strict=True)
            ],
            "executor_pids": self.executor_pids(),
            "work_dir": info.work_dir,
            "root": str(self.root),
        }

    def executor_pids(self) -> list[int]:
        """Return the pids of the executor JVMs this cluster's workers launched.

        An executor is a ``CoarseGrainedExecutorBackend`` whose ``--worker-url``
        is one of these workers', found by scanning ``/proc/*/cmdline``.
        """
        if self._info is None:
            return []
        return worker_executors({w.url for w in self._info.workers})

    def _is_master(self, pid: int) -> bool:
        return is_master(pid, str(self._info.master_port) if self._info else "")

    def _is_worker(self, pid: int) -> bool:
        dirs = [w.work_dir for w in self._info.workers] if self._info else []
        return is_worker(pid, dirs)

    # --- lifecycle -------------------------------------------------------------

    @classmethod
    def attach(cls, root: Path) -> StandaloneCluster:
        """Return the cluster described by ``root/standalone.json``.

        Its pids are trusted only while their command lines match, so a stale
        file (cluster gone, pids recycled) is harmless: ``stop()`` does nothing.

        Raises:
            StandaloneClusterError: there is no readable ``standalone.json``.
        """
        path = Path(root) / _STATE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            info = ClusterInfo.from_json(raw)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            msg = f"no standalone cluster recorded in {path}: {exc}"
            raise StandaloneClusterError(msg) from exc
        cluster = cls(Path(root), detached=True)
        cluster._info = info
        return cluster

    def start(self) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker is ALIVE.

        Calling it on a running cluster does nothing.

        Raises:
            SparkMissingError: java or pyspark is not installed.
            StandaloneClusterError: a daemon exited or was not ALIVE in time;
                the message quotes its log tail.
        """
        if self.master_pid is not None and all(self.worker_pids()):
            return self
        self.stop()  # a half-started earlier attempt
        check_java()
        spark_class = str(spark_home() / "bin" / "spark-class")
        master_port = free_port()
        host = self.master_at.host
        workers = []
        for index, spot in enumerate(self.workers_at):
            self._work_dir(index).mkdir(parents=True, exist_ok=True)
            work_dir = str(self._work_dir(index))
            workers.append(WorkerInfo(spot.host, free_port(), free_port(), work_dir))
        info = ClusterInfo(
            master=f"spark://{host}:{master_port}",
            master_port=master_port,
            master_webui_port=free_port(),
            workers=tuple(workers),
            master_host=host,
        )
        self._info = info
        try:
            argv = master_command(spark_class, info)
            master_pid = self._spawn("master", self.master_at, argv)
            self._info = info = info.with_master_pid(master_pid)
            self._wait_alive("master", master_pid, lambda s: s.get("status") == "ALIVE")
            for index, (spot, worker) in enumerate(
                zip(self.workers_at, workers, strict=True)
            ):
                name = "worker" if index == 0 else f"worker{index + 1}"
                argv = worker_command(
                    spark_class,
                    info.master,
                    worker,
                    cores=self.cores,
                    memory=self.memory,
                )
                worker_pid = self._spawn(name, spot, argv)
                self._info = info = info.with_worker_pid(index, worker_pid)
            for index, worker in enumerate(info.workers):
                name = "worker" if index == 0 else f"worker{index + 1}"
                self._wait_alive(name, worker.pid or 0, worker_registered(worker))
        except BaseException:
            self.stop()
            raise
        self._save()
        logger.info("Spark standalone cluster up at %s (%s)", info.master, self.root)
        return self

    def _spawn(self, daemon: str, spot: DaemonSpot, argv: list[str]) -> int:
        proc = spawn_daemon(
            argv,
            spot=spot,
            env=self.env,
            log=self.log_path(daemon),
            cwd=self.root,
            detached=self.detached,
            run=None
            if self.launch_through is None
            else self.launch_through(daemon, list(argv)),
        )
        self._procs[proc.pid] = proc
        logger.info("Spark %s pid %s starting", daemon, proc.pid)
        return proc.pid

    def _wait_alive(
        self, daemon: str, pid: int, ready: Callable[[dict[str, Any]], bool]
    ) -> None:
        wait_alive(
            daemon,
            self._procs[pid],
            url=f"{self.info.master_webui}/json/",
            ready=ready,
            timeout_s=self.start_timeout_s,
            log=self.log_path(daemon),
        )

    def _save(self) -> None:
        tmp = self.root / (_STATE + ".tmp")
        tmp.write_text(json.dumps(self.info.to_json(), indent=2), encoding="utf-8")
        tmp.replace(self.root / _STATE)

    def stop(self) -> None:
        """Stop workers, then master (SIGTERM, then SIGKILL), then stray executors.

        Idempotent; does nothing on a cluster never started.
        """
        if self._info is None:
            return
        executors = self.executor_pids()
        daemons = [w.pid for w in self._info.workers] + [self._info.master_pid]
        for pid in daemons:
            if pid is not None:
                self._terminate(pid)
        # A worker kills its executors on SIGTERM; a SIGKILLed one cannot.
        for pid in self.executor_pids() or executors:
            self._terminate(pid)
        self._info = self._info.stopped()
        if (self.root / _STATE).exists():
            self._save()

    def _running(self, pid: int) -> bool:
        proc = self._procs.get(pid)
        if proc is not None:  # our child: maybe still the spark-class shell
            return proc.poll() is None
        info = self._info
        daemons = [w.pid for w in info.workers] + [info.master_pid] if info else []
        if pid in daemons:
            return self._is_master(pid) or self._is_worker(pid)
        return bool(command_line(pid))  # an executor, found by its command line

    def _terminate(self, pid: int) -> None:
        terminate(pid, running=self._running, stop_timeout_s=self.stop_timeout_s)
        proc = self._procs.pop(pid, None)
        if proc is not None:
            proc.wait()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
