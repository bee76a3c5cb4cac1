"""What a Storm cluster of the lab records (``cluster.json``) and its ``storm.yaml``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sr3.jvm import LAB_JVM_FLAGS

__all__ = [
    "DaemonHost",
    "StormClusterInfo",
    "SupervisorInfo",
    "cluster_conf",
    "write_yaml",
]


@dataclass(frozen=True)
class DaemonHost:
    """Where a daemon runs when not on loopback (the lab's network namespaces).

    Attributes:
        address: Its ``storm.local.hostname``: what it binds and announces.
        launch_prefix: Runs its JVM there (``ip netns exec NS``, which execs,
            so the pid is the JVM's); its workers inherit the place.
    """

    address: str
    launch_prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class SupervisorInfo:
    """One supervisor of the cluster: its dirs, ports and pid.

    Attributes:
        index: 1-based, as in ``supervisor-<index>``.
        local_dir: Its ``storm.local.dir`` (its id, its workers' dirs).
        slots: Its ``supervisor.slots.ports``: one worker JVM per port.
        thrift_port: Its ``supervisor.thrift.port`` (workers heartbeat there).
        pid: The supervisor JVM (None once stopped).
        host: Its ``storm.local.hostname`` (loopback unless placed).
        launch_prefix: What its JVM runs through (see :class:`DaemonHost`).
    """

    index: int
    local_dir: str
    slots: tuple[int, ...]
    thrift_port: int
    pid: int | None = None
    host: str = "127.0.0.1"
    launch_prefix: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``supervisor-<index>``."""
        return f"supervisor-{self.index}"


@dataclass(frozen=True)
class StormClusterInfo:
    """What ``cluster.json`` records: enough to find, query and stop the cluster."""

    version: str
    storm_home: str
    conf_file: str
    zk_hosts: str
    zk_root: str
    nimbus_port: int
    nimbus_pid: int | None = None
    supervisors: tuple[SupervisorInfo, ...] = ()
    ui_port: int | None = None
    nimbus_host: str = "127.0.0.1"
    nimbus_launch_prefix: tuple[str, ...] = ()

    @property
    def nimbus(self) -> str:
        """Nimbus's Thrift address, ``HOST:PORT`` (``127.0.0.1`` unless placed)."""
        return f"{self.nimbus_host}:{self.nimbus_port}"

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-able dict (read back by :meth:`from_json`)."""
        raw = asdict(self)
        raw["supervisors"] = [asdict(s) for s in self.supervisors]
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StormClusterInfo:
        """Read what :meth:`to_json` wrote.

        Raises:
            TypeError, ValueError, KeyError: not such a dict.
        """
        sups = tuple(
            SupervisorInfo(
                **{
                    **s,
                    "slots": tuple(s["slots"]),
                    "launch_prefix": tuple(s.get("launch_prefix", ())),
                }
            )
            for s in raw.get("supervisors", ())
        )
        prefix = tuple(raw.get("nimbus_launch_prefix", ()))
        return cls(**{**raw, "supervisors": sups, "nimbus_launch_prefix": prefix})


def cluster_conf(
    info: StormClusterInfo,
    *,
    root: Path,
    log_dir: Path,
    worker_heap_mb: int,
    extra: Mapping[str, object],
) -> dict[str, object]:
    """Return the cluster's ``storm.yaml`` entries; ``extra`` is applied last.

    Timeouts are test-sized (failures seen in seconds, not minutes);
    ``topology.message.timeout.secs`` is left to each topology. Supervisors
    override ``storm.local.dir``, ``supervisor.slots.ports`` and
    ``supervisor.thrift.port`` with ``-Dstorm.options``.
    """
    first = info.supervisors[0]
    host, _, port = info.zk_hosts.rpartition(":")
    return {
        "storm.zookeeper.servers": [host],
        "storm.zookeeper.port": int(port),
        "storm.zookeeper.root": info.zk_root,
        # short enough that a SIGKILLed supervisor's znode goes within seconds
        "storm.zookeeper.session.timeout": 8000,
        "storm.zookeeper.connection.timeout": 8000,
        "nimbus.seeds": [info.nimbus_host],
        "nimbus.thrift.port": info.nimbus_port,
        "storm.local.hostname": info.nimbus_host,
        "storm.local.dir": str(root / "local" / "nimbus"),
        "storm.log.dir": str(log_dir),
        "supervisor.slots.ports": list(first.slots),
        "supervisor.thrift.port": first.thrift_port,
        "nimbus.monitor.freq.secs": 2,
        "nimbus.supervisor.timeout.secs": 15,
        "nimbus.task.timeout.secs": 15,
        "nimbus.task.launch.secs": 60,
        "supervisor.worker.start.timeout.secs": 60,
        "supervisor.worker.timeout.secs": 15,
        "supervisor.monitor.frequency.secs": 1,
        # the supervisor waits this long between asking a worker to stop and
        # killing it, even when the worker is already dead (a SIGKILL, a
        # crash): 3 s of every worker recovery by default
        "supervisor.worker.shutdown.sleep.secs": 1,
        "supervisor.heartbeat.frequency.secs": 2,
        "worker.heartbeat.frequency.secs": 1,
        # executors report their counts to Nimbus every 60 s by default: run
        # reports and `sr3 status` read them through Nimbus
        "executor.metrics.frequency.secs": 1,
        "worker.heap.memory.mb": worker_heap_mb,
        # a worker of a Python topology relays tuples between its tasks: the
        # lab's JVM flags (sr3/jvm.py) cost it no throughput and save CPU
        "worker.childopts": " ".join(
            (f"-Xmx{worker_heap_mb}m", "-Djava.net.preferIPv4Stack=true")
            + LAB_JVM_FLAGS
        ),
        "topology.worker.logwriter.childopts": " ".join(("-Xmx64m", *LAB_JVM_FLAGS)),
        "storm.health.check.dir": str(root / "healthchecks"),
        # Nimbus's metrics store defaults to STORM_HOME/storm_rocks: keep the
        # shared jar cache read-only
        "storm.metricstore.rocksdb.location": str(
            root / "local" / "nimbus" / "storm_rocks"
        ),
        # Nimbus blacklists a supervisor missing 3 times in 5 min for 30 min;
        # the lab kills supervisors on purpose, so never blacklist here
        "blacklist.scheduler.tolerance.count": 1_000_000,
        **extra,
    }


def write_yaml(path: Path, conf: Mapping[str, object], what: str) -> None:
    """Write ``conf`` as YAML (each value as JSON, a YAML subset), atomically."""
    lines = [f"# Written by sr3 for {what}.\n"]
    lines += [f"{key}: {json.dumps(value)}\n" for key, value in conf.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(path)
