"""The lab's real Apache Storm cluster: ``sr3 lab up --storm``, its status, its stop.

Nimbus and the supervisors run from the jars ``scripts/fetch-jars.sh`` fetched
(:class:`storm_bridge.apache.ApacheStormCluster`), in the lab's ``storm/`` dir,
against the lab's ZooKeeper under the znode root ``/storm``. Every worker gets
the lab's ring in its Storm conf (``sr3.zk.hosts``, ``sr3.zk.chroot`` in the
cluster's ``storm.yaml``) and the ring secret as ``SR3_NODE_SECRET`` in its
environment (kept out of ``storm.yaml``, whose values workers log), which
:func:`storm_bridge.wiring.config_from_conf` falls back to.

In a netns lab (``sr3 lab up --netns``) Nimbus runs on ``h1`` beside ZooKeeper
and supervisor ``i`` on the host of ring node ``node-i``
(:func:`sr3_cli.lab_netns.daemon_placements`), each bound to its host's
address; workers run where their supervisor does. There every daemon starts
as on a Vagrant VM: through the wrapper ``vagrant/provision/storm.sh`` writes
(:mod:`sr3_cli.provision`), under the lab's ``storm/provision/<daemon>/``, from
the lab's ``storm.yaml`` and the options the cluster chose for it.

lab.json records the cluster in its ``storm`` section (:attr:`Lab.storm`: dir
and Nimbus address), changed only under the lab's lock; ``sr3 lab down``
(:meth:`Lab.stop`) stops the cluster, its workers included, before the rest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sr3_cli import lab_netns
from sr3_cli.lab import Lab
from sr3_cli.provision import provision

if TYPE_CHECKING:
    from storm_bridge.apache import ApacheStormCluster
    from storm_bridge.apache.daemon_jvms import DaemonStart

__all__ = [
    "start_storm",
    "stop_storm",
    "storm_daemons",
    "storm_cluster",
    "storm_status",
    "storm_zk_root",
]

logger = logging.getLogger(__name__)

#: Storm's znode root in the lab's ZooKeeper (the ring lives under /sr3).
ZK_ROOT: Final = "/storm"


def storm_zk_root(lab: Lab) -> str:
    """Storm's znode root: ``/storm``, or beside the lab's chroot on a shared one.

    A lab on an external ZooKeeper (``sr3 lab up --zk``) shares it with other
    labs, so its Storm cluster gets a root named after its chroot.
    """
    if lab.zk_external:
        return f"/storm-{lab.chroot.rsplit('/', 1)[-1]}"
    return ZK_ROOT


def _env(lab: Lab) -> dict[str, str]:
    return {"SR3_NODE_SECRET": lab.secret()}


def _provisioned(lab: Lab) -> Callable[[DaemonStart], list[str]] | None:
    """A netns lab's daemons start as on a VM: the wrapper storm.sh writes.

    None on loopback (the command line itself runs).
    """
    if lab.netns is None:
        return None

    def launch(start: DaemonStart) -> list[str]:
        places = lab_netns.daemon_placements(lab, ["nimbus", start.name])
        wrapper = provision(
            "storm.sh",
            lab.root / "storm" / "provision" / start.name,
            secret_file=lab.secret_file,
            env={
                "SR3_HOST_IP": places[start.name].address,
                "SR3_ZK": lab.zk_hosts,
                "SR3_NIMBUS": places["nimbus"].address,
                "SR3_STORM_CONF": str(start.conf_file),
                "SR3_STORM_NAME": start.name,
                "SR3_STORM_OPTIONS": json.dumps(dict(start.options)),
                "SR3_STORM_JVM_ARGS": json.dumps(list(start.jvm_args)),
                "SR3_STORM_LOG_DIR": str(start.log_dir),
                "SR3_STORM_HEAP_MB": str(start.heap_mb),
                "SR3_JAVA": start.java,
            },
            service=f"storm-{start.name}",
            args=(start.daemon,),
        )
        return [str(wrapper)]

    return launch


def storm_cluster(lab: Lab) -> ApacheStormCluster | None:
    """Return the lab's Storm cluster as lab.json records it, else None."""
    section = lab.storm
    if section is None or "dir" not in section:
        return None
    from storm_bridge.apache import (  # noqa: PLC0415 (streamparse only when asked)
        ApacheStormCluster,
        StormClusterError,
    )

    try:
        return ApacheStormCluster.attach(
            Path(section["dir"]), env=_env(lab), launch_through=_provisioned(lab)
        )
    except StormClusterError:
        return None


def start_storm(
    lab: Lab, *, supervisors: int = 1, slots: int = 2, nimbus_port: int | None = None
) -> ApacheStormCluster:
    """Start the lab's Nimbus and supervisors unless they run; return the cluster.

    The lab's ZooKeeper must run. A running cluster with as many supervisors
    is kept; one with another count is stopped and started again.

    Raises:
        StormMissingError: Storm's jars are not fetched, or java is missing.
        StormClusterError: Nimbus's port is taken, or a daemon did not start
            (the message quotes its output).
    """
    with lab.locked():
        running = storm_cluster(lab)
        if running is not None:
            info = running.info
            healthy = running.nimbus_pid is not None and all(
                running.supervisor_pid(s.index) for s in info.supervisors
            )
            if healthy and len(info.supervisors) == supervisors:
                return running
            running.stop()
        from storm_bridge.apache import (  # noqa: PLC0415 (as above)
            ApacheStormCluster,
            DaemonHost,
        )

        names = ["nimbus", *(f"supervisor-{i}" for i in range(1, supervisors + 1))]
        hosts = {
            name: DaemonHost(where.address, tuple(where.prefix))
            for name, where in lab_netns.daemon_placements(lab, names).items()
        }
        cluster = ApacheStormCluster(
            lab.root / "storm",
            zk_hosts=lab.zk_hosts,
            zk_root=storm_zk_root(lab),
            supervisors=supervisors,
            slots=slots,
            nimbus_port=nimbus_port,
            conf={"sr3.zk.hosts": lab.zk_hosts, "sr3.zk.chroot": lab.chroot},
            env=_env(lab),
            detached=True,
            hosts=hosts,
            launch_through=_provisioned(lab),
        )
        # recorded first: should this command die while the JVMs start,
        # `sr3 lab down` still finds them through cluster.json
        lab.storm = {"dir": str(cluster.root), "nimbus": None}
        try:
            cluster.start()
        except BaseException:
            lab.storm = None
            raise
        lab.storm = {
            "dir": str(cluster.root),
            "nimbus": cluster.nimbus,
            "supervisors": supervisors,
            "slots": slots,
            "conf_file": str(cluster.conf_file),
        }
        return cluster


def stop_storm(lab: Lab) -> list[int]:
    """Stop the lab's supervisors, their workers and Nimbus; return the pids stopped."""
    with lab.locked():
        cluster = storm_cluster(lab)
        stopped = cluster.stop() if cluster is not None else []
        lab.storm = None
        return stopped


def storm_daemons(lab: Lab) -> list[str]:
    """Return the names of the lab's Storm daemons as lab.json records them."""
    if lab.storm is None:
        return []
    count = int(lab.storm.get("supervisors") or 0)
    return ["nimbus", *(f"supervisor-{i}" for i in range(1, count + 1))]


def storm_status(lab: Lab) -> dict[str, Any] | None:
    """Return the ``storm`` object of ``sr3 status --json`` (None: no cluster)."""
    cluster = storm_cluster(lab)
    return cluster.status() if cluster is not None else None
