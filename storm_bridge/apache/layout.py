"""Where a Storm cluster's daemons live, and its record on disk.

Nimbus's Thrift port, each supervisor's local dir, slots and Thrift port are
chosen once per start; ``cluster.json`` records them (with the pids) so that
:meth:`~storm_bridge.apache.daemons.ApacheStormCluster.attach` finds the
cluster again, and ``conf/storm.yaml`` hands them to every daemon and worker.
Layout of the cluster's root dir (a lab's ``storm/``)::

    cluster.json          version, ports, pids (written by start())
    conf/storm.yaml       the cluster's conf, read by every daemon and worker
    nimbus.out            a daemon's stdout/stderr (JVM crashes, early errors)
    supervisor-<i>.out
    logs/                 storm.log.dir: nimbus.log, supervisor-<i>.log and
                          workers-artifacts/<topology>/<port>/worker.log
    local/nimbus/         Nimbus's storm.local.dir (blobs)
    local/supervisor-<i>/ supervisor i's storm.local.dir (its id, workers)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

from storm_bridge.apache.daemon_jvms import StormClusterError
from storm_bridge.apache.home import StormHome
from storm_bridge.apache.procs import free_port, port_free
from storm_bridge.apache.state import (
    DaemonHost,
    StormClusterInfo,
    SupervisorInfo,
    cluster_conf,
    write_yaml,
)

__all__ = [
    "DEFAULT_NIMBUS_PORT",
    "STATE_FILE",
    "load_info",
    "pick_nimbus_port",
    "place",
    "plan_cluster",
    "plan_supervisors",
    "save_info",
    "write_conf",
]

logger = logging.getLogger(__name__)

DEFAULT_NIMBUS_PORT: Final = 6627
#: What a cluster records in its root dir (:class:`StormClusterInfo` as JSON).
STATE_FILE: Final = "cluster.json"

E_PORT_TAKEN = (
    "cannot start Nimbus on 127.0.0.1:{port}: the port is taken by another "
    "process. Stop it, or start the cluster on another port (`sr3 lab up --storm "
    "--nimbus-port PORT`, or 0 for any free port) and point clients there "
    '(config.json\'s env `lab`: "nimbus": "127.0.0.1:PORT")'
)


def pick_nimbus_port(requested: int | None) -> int:
    """Return Nimbus's Thrift port.

    Args:
        requested: None takes 6627 when free, else a free port (logged); 0 a
            free port; any other must be free.

    Raises:
        StormClusterError: the requested port is taken.
    """
    if requested is None:
        if port_free(DEFAULT_NIMBUS_PORT):
            return DEFAULT_NIMBUS_PORT
        port = free_port()
        logger.warning(
            "Nimbus's default port %s is taken; this cluster's Nimbus listens on "
            "%s (point config.json's env `lab` or --nimbus there)",
            DEFAULT_NIMBUS_PORT,
            port,
        )
        return port
    if requested == 0:
        return free_port()
    if not port_free(requested):
        raise StormClusterError(E_PORT_TAKEN.format(port=requested))
    return requested


def plan_supervisors(root: Path, count: int, slots: int) -> tuple[SupervisorInfo, ...]:
    """Return ``count`` supervisors with their local dirs under ``root/local``.

    Each gets ``slots`` free worker ports and a free Thrift port.
    """
    return tuple(
        SupervisorInfo(
            index=i,
            local_dir=str(root / "local" / f"supervisor-{i}"),
            slots=tuple(free_port() for _ in range(slots)),
            thrift_port=free_port(),
        )
        for i in range(1, count + 1)
    )


def plan_cluster(  # noqa: PLR0913 (keyword-only options)
    home: StormHome,
    root: Path,
    *,
    zk_hosts: str,
    zk_root: str,
    nimbus_port: int | None,
    supervisors: int,
    slots: int,
) -> StormClusterInfo:
    """Return a cluster of ``home``'s Storm to start in ``root`` (no pids yet).

    Args:
        home: The fetched STORM_HOME.
        root: The cluster's root dir.
        zk_hosts: The ZooKeeper the cluster uses.
        zk_root: Storm's znode root.
        nimbus_port: As :func:`pick_nimbus_port` takes it.
        supervisors: How many supervisors.
        slots: Worker slots per supervisor.

    Raises:
        StormClusterError: the requested Nimbus port is taken.
    """
    port = pick_nimbus_port(nimbus_port)
    return StormClusterInfo(
        version=home.version,
        storm_home=str(home.root),
        conf_file=str(root / "conf" / "storm.yaml"),
        zk_hosts=zk_hosts,
        zk_root=zk_root,
        nimbus_port=port,
        supervisors=plan_supervisors(root, supervisors, slots),
    )


def place(info: StormClusterInfo, hosts: Mapping[str, DaemonHost]) -> StormClusterInfo:
    """Return ``info`` with the daemons ``hosts`` names moved to their hosts.

    Keys are daemon names (``nimbus``, ``supervisor-<i>``); daemons not named
    stay on 127.0.0.1.
    """
    nimbus = hosts.get("nimbus")
    sups = tuple(
        replace(s, host=h.address, launch_prefix=h.launch_prefix)
        if (h := hosts.get(s.name)) is not None
        else s
        for s in info.supervisors
    )
    if nimbus is None:
        return replace(info, supervisors=sups)
    return replace(
        info,
        supervisors=sups,
        nimbus_host=nimbus.address,
        nimbus_launch_prefix=nimbus.launch_prefix,
    )


def write_conf(
    info: StormClusterInfo,
    *,
    root: Path,
    log_dir: Path,
    worker_heap_mb: int,
    extra: Mapping[str, object],
) -> None:
    """Write the cluster's ``storm.yaml`` (``info.conf_file``) and its log dir."""
    conf = cluster_conf(
        info, root=root, log_dir=log_dir, worker_heap_mb=worker_heap_mb, extra=extra
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(Path(info.conf_file), conf, f"the Apache Storm cluster in {root}")


def load_info(root: Path) -> StormClusterInfo:
    """Return what ``root/cluster.json`` records.

    Raises:
        StormClusterError: there is no readable ``cluster.json``.
    """
    path = Path(root) / STATE_FILE
    try:
        return StormClusterInfo.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        msg = f"no Apache Storm cluster recorded in {path}: {exc}"
        raise StormClusterError(msg) from exc


def save_info(root: Path, info: StormClusterInfo) -> None:
    """Replace ``root/cluster.json`` with ``info`` (atomically)."""
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(info.to_json(), indent=2), encoding="utf-8")
    tmp.replace(root / STATE_FILE)
