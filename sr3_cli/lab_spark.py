"""The lab's Spark standalone cluster: ``sr3 lab up --spark``, and its stop.

A master and workers (:class:`spark_bridge.standalone.StandaloneCluster`) run
in the lab's ``spark/`` dir; lab.json records them in its ``spark`` section
(:attr:`Lab.spark`: master URL, web UI, pids, workers, cores, memory, dir),
changed only under the lab's lock. pyspark is imported only when a Spark
cluster is asked for.

On loopback there is one worker. In a netns lab (``sr3 lab up --netns
--spark``) the master runs on ``h1`` and one worker on each of the first
:data:`NETNS_WORKERS` worker hosts (``spark-worker-<i>``, placed by
:mod:`sr3_cli.lab_netns` as Storm's supervisors), each bound to its host's
address; the section's ``driver_host`` is the address a driver in the root
namespace binds (``sr3 run --engine spark`` does so by itself). There every
daemon starts as on a Vagrant VM: through the wrapper
``vagrant/provision/spark.sh`` writes (:mod:`sr3_cli.provision`), under the
lab's ``spark/provision/<daemon name>/``, with the ports and dirs the cluster
chose.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sr3_cli import lab_netns
from sr3_cli.provision import provision

if TYPE_CHECKING:
    from spark_bridge.standalone import StandaloneCluster
    from sr3_cli.lab_state import LabState

__all__ = [
    "NETNS_WORKERS",
    "spark_cluster",
    "spark_daemons",
    "spark_status",
    "start_spark",
    "stop_spark",
]

#: Spark workers of a netns lab: at most this many, one per worker host (as the
#: Vagrant lab's two worker VMs).
NETNS_WORKERS: Final = 2


def _worker_count(lab: LabState) -> int:
    if lab.netns is None:
        return 1
    return min(NETNS_WORKERS, lab_netns.worker_hosts(lab))


def spark_daemons(lab: LabState) -> list[str]:
    """Return the names of the lab's Spark daemons (``spark-master``, ...)."""
    if lab.spark is None:
        return []
    count = len(lab.spark.get("workers") or [None])
    return ["spark-master", *(f"spark-worker-{i}" for i in range(1, count + 1))]


def _provisioned(
    lab: LabState, secret_file: Path
) -> Callable[[str, list[str]], list[str]]:
    """Start each daemon as on a VM: the wrapper spark.sh writes for its command.

    ``argv`` is what :mod:`spark_bridge.standalone_jvms` would run: ``spark-class``,
    the main class, (a worker: the master URL), then ``--option value`` pairs,
    which become the script's settings.
    """

    def launch(daemon: str, argv: list[str]) -> list[str]:
        first = next(i for i, word in enumerate(argv) if word.startswith("--"))
        opts = dict(zip(argv[first::2], argv[first + 1 :: 2], strict=False))
        host, port = opts["--host"], opts["--port"]
        # the lab's names: worker, worker2 -> spark-worker-1, spark-worker-2
        service = (
            "spark-master"
            if daemon == "master"
            else f"spark-worker-{daemon.removeprefix('worker') or 1}"
        )
        env = {"SR3_HOST_IP": host, "SR3_SPARK_SERVICE": service}
        if daemon == "master":
            role = "master"
            env |= {
                "SR3_SPARK_MASTER": f"spark://{host}:{port}",
                "SR3_SPARK_PORT": port,
                "SR3_SPARK_WEBUI_PORT": opts["--webui-port"],
            }
        else:
            role = "worker"
            env |= {
                "SR3_SPARK_MASTER": argv[first - 1],
                "SR3_SPARK_WORKER_PORT": port,
                "SR3_SPARK_WORKER_WEBUI_PORT": opts["--webui-port"],
                "SR3_SPARK_CORES": opts["--cores"],
                "SR3_SPARK_MEMORY": opts["--memory"],
                "SR3_SPARK_WORK_DIR": opts["--work-dir"],
            }
        root = lab.root / "spark" / "provision" / service
        wrapper = provision(
            "spark.sh",
            root,
            secret_file=secret_file,
            env=env,
            service=service,
            args=(role,),
        )
        return [str(wrapper)]

    return launch


def start_spark(lab: LabState, *, cores: int, memory: str, secret_file: Path) -> str:
    """Start the lab's Spark master and workers unless they run; return its URL.

    Call it inside ``lab.locked()``. A netns lab's daemons start through the
    wrappers ``vagrant/provision/spark.sh`` writes (they read ``secret_file``).

    Raises:
        SR3Error: java or pyspark is missing, a daemon did not start (the
            message quotes its log), or a netns lab's provisioning failed.
    """
    from spark_bridge.standalone import (  # noqa: PLC0415 (pyspark only when asked)
        DaemonSpot,
        StandaloneCluster,
    )

    running = spark_cluster(lab)
    if running is not None:
        if running.master_pid is not None and all(running.worker_pids()):
            return running.url
        running.stop()
    workers = [f"spark-worker-{i}" for i in range(1, _worker_count(lab) + 1)]
    places = lab_netns.daemon_placements(lab, ["spark-master", *workers])

    def spot(name: str) -> DaemonSpot:
        where = places.get(name)
        return DaemonSpot(where.address, tuple(where.prefix)) if where else DaemonSpot()

    cluster = StandaloneCluster(
        lab.root / "spark",
        cores=cores,
        memory=memory,
        detached=True,
        master_at=spot("spark-master"),
        workers_at=[spot(name) for name in workers],
        launch_through=None if lab.netns is None else _provisioned(lab, secret_file),
    ).start()
    info = cluster.info
    lab.spark = {
        "master": info.master,
        "master_webui": info.master_webui,
        "master_pid": info.master_pid,
        "worker_pid": info.worker_pid,
        "workers": [
            {"name": name, "host": w.host, "pid": w.pid}
            for name, w in zip(workers, info.workers, strict=True)
        ],
        "driver_host": lab_netns.driver_address(lab, info.master),
        "cores": cores,
        "memory": memory,
        "dir": str(cluster.root),
    }
    return info.master


def stop_spark(lab: LabState) -> None:
    """Stop the lab's Spark workers, master and executors, if any.

    Call it inside ``lab.locked()``.
    """
    cluster = spark_cluster(lab)
    if cluster is not None:
        cluster.stop()
    lab.spark = None


def spark_cluster(lab: LabState) -> StandaloneCluster | None:
    """Return the lab's Spark cluster as lab.json records it, else None."""
    if lab.spark is None:
        return None
    from spark_bridge.standalone import (  # noqa: PLC0415 (pyspark only when asked)
        StandaloneCluster,
        StandaloneClusterError,
    )

    try:
        return StandaloneCluster.attach(Path(lab.spark["dir"]))
    except StandaloneClusterError:
        return None


def spark_status(lab: LabState) -> dict[str, Any] | None:
    """Return the ``spark`` object of ``sr3 status --json`` (None: no cluster).

    The master's URL and web UI, each worker's host and pid (None once dead),
    the executors, and ``driver_host`` (netns lab: the address a driver binds).
    """
    cluster = spark_cluster(lab)
    if cluster is None or lab.spark is None:
        return None
    status = cluster.status()
    names = [w.get("name") for w in lab.spark.get("workers") or []]
    for worker, name in zip(status["workers"], names, strict=False):
        worker["name"] = name
    status["driver_host"] = lab.spark.get("driver_host")
    return status
