"""What a running Storm cluster reports: its processes, and Nimbus's view of it.

:func:`cluster_status` is ``sr3 status``'s JSON-able summary of a lab's Storm
cluster; :func:`wait_supervisors` waits until Nimbus lists a given number of
supervisors (after one was killed or restarted).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

from storm_bridge.apache.daemon_jvms import StormClusterError
from storm_bridge.apache.nimbus import ClusterSummary, NimbusUnreachableError

if TYPE_CHECKING:
    from storm_bridge.apache.daemons import ApacheStormCluster

__all__ = ["UI_UNAVAILABLE", "cluster_status", "wait_supervisors"]

_POLL_S: Final = 0.2
#: Why there is no UI: storm-webapp (``org.apache.storm.daemon.ui.UIServer``)
#: is not served by Maven Central for any 2.x release.
UI_UNAVAILABLE: Final = (
    "no Storm UI: org.apache.storm:storm-webapp is not on Maven Central, so the "
    "lab cannot fetch it; use `sr3 status` (Nimbus's Thrift API) instead"
)


def cluster_status(cluster: ApacheStormCluster) -> dict[str, Any]:
    """Return a JSON-able summary: nimbus, UI, supervisors with slots, topologies.

    Never raises for an unreachable Nimbus: ``error`` then says why, and
    the process fields still tell what runs.

    Raises:
        StormClusterError: ``cluster`` is not started.
    """
    info = cluster.info
    out: dict[str, Any] = {
        "version": info.version,
        "nimbus": info.nimbus,
        "nimbus_pid": cluster.nimbus_pid,
        "leader": False,
        "ui": None if info.ui_port is None else f"http://127.0.0.1:{info.ui_port}",
        "ui_note": UI_UNAVAILABLE if info.ui_port is None else None,
        "zk": f"{info.zk_hosts}{info.zk_root}",
        "conf_file": info.conf_file,
        "logs": str(cluster.log_dir),
        "supervisors": [],
        "supervisor_processes": [
            {
                "name": s.name,
                "pid": cluster.supervisor_pid(s.index),
                "slots": list(s.slots),
                "workers": cluster.worker_pids(s.index),
                "local_dir": s.local_dir,
            }
            for s in info.supervisors
        ],
        "topologies": [],
        "error": None,
    }
    try:
        summary = cluster.summary()
    except NimbusUnreachableError as exc:
        out["error"] = str(exc)
        return out
    out["leader"] = summary.leader is not None
    out["supervisors"] = [
        {**asdict(s), "free_slots": s.free_slots} for s in summary.supervisors
    ]
    out["topologies"] = [asdict(t) for t in summary.topologies]
    return out


def wait_supervisors(
    cluster: ApacheStormCluster, count: int, *, timeout_s: float
) -> ClusterSummary:
    """Wait until Nimbus lists exactly ``count`` supervisors; return the summary.

    Raises:
        StormClusterError: not so within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    seen: ClusterSummary | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(NimbusUnreachableError):
            seen = cluster.summary()
            if len(seen.supervisors) == count:
                return seen
        time.sleep(_POLL_S)  # readiness through Thrift/proc: poll to a deadline
    have = "Nimbus unreachable" if seen is None else f"{len(seen.supervisors)} listed"
    msg = (
        f"Nimbus at {cluster.nimbus} did not list {count} supervisor(s) within "
        f"{timeout_s} s ({have}); see the supervisor logs in {cluster.log_dir}"
    )
    raise StormClusterError(msg)
