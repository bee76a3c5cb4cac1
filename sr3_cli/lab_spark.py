"""The lab's Spark standalone cluster: ``sr3 lab up --spark``, and its stop.

A master and a worker (:class:`spark_bridge.standalone.StandaloneCluster`) run
in the lab's ``spark/`` dir; lab.json records them in its ``spark`` section
(:attr:`Lab.spark`: master URL, web UI, pids, cores, memory, dir), changed only
under the lab's lock. pyspark is imported only when a Spark cluster is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_bridge.standalone import StandaloneCluster
    from sr3_cli.lab_state import LabState

__all__ = ["spark_cluster", "start_spark", "stop_spark"]


def start_spark(lab: LabState, *, cores: int, memory: str) -> str:
    """Start the lab's Spark master and worker unless they run; return its URL.

    Call it inside ``lab.locked()``.

    Raises:
        SR3Error: java or pyspark is missing, or a daemon did not start (the
            message quotes its log).
    """
    from spark_bridge.standalone import StandaloneCluster  # noqa: PLC0415 (pyspark only when asked)

    running = spark_cluster(lab)
    if running is not None:
        if running.master_pid is not None and running.worker_pid is not None:
            return running.url
        running.stop()
    cluster = StandaloneCluster(
        lab.root / "spark", cores=cores, memory=memory, detached=True
    ).start()
    info = cluster.info
    lab.spark = {
        "master": info.master,
        "master_webui": info.master_webui,
        "master_pid": info.master_pid,
        "worker_pid": info.worker_pid,
        "cores": cores,
        "memory": memory,
        "dir": str(cluster.root),
    }
    return info.master


def stop_spark(lab: LabState) -> None:
    """Stop the lab's Spark worker, master and executors, if any.

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
