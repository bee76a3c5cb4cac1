"""What a lab Kafka broker is configured with: its recorded identity and properties.

:class:`BrokerInfo` is what ``broker.json`` records (ports, cluster id, pid,
KRaft node id and voters); :func:`server_properties` renders the
``server.properties`` a broker with that identity runs with.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BrokerInfo", "new_cluster_id", "server_properties"]


def new_cluster_id() -> str:
    """Return a Kafka cluster id: 16 random bytes, base64url, no padding."""
    while True:
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not raw.startswith("-"):  # Kafka's Uuid avoids ids a CLI reads as flags
            return raw


@dataclass(frozen=True)
class BrokerInfo:
    """What ``broker.json`` records: enough to find, restart and stop the broker.

    Attributes:
        port: The PLAINTEXT listener clients use.
        controller_port: The KRaft controller listener.
        cluster_id: The id the storage was formatted with.
        pid: The broker JVM's pid (None once stopped).
        node_id: The KRaft ``node.id`` (1 for a single broker).
        voters: ``controller.quorum.voters`` of a multi-node cluster
            (``1@127.0.0.1:PORT,2@...``); None: a standalone single node.
        host: The address it listens on and advertises (a netns lab host's;
            default loopback).
    """

    port: int
    controller_port: int
    cluster_id: str
    pid: int | None = None
    node_id: int = 1
    voters: str | None = None
    host: str = "127.0.0.1"

    @property
    def replicas(self) -> int:
        """How many nodes the cluster has (the voters; 1 standalone)."""
        return 1 if self.voters is None else self.voters.count(",") + 1

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``HOST:PORT``."""
        return f"{self.host}:{self.port}"


def server_properties(info: BrokerInfo, data_dir: Path) -> str:
    """Return the ``server.properties`` of the broker ``info`` describes.

    Args:
        info: The broker's ports, node id and voters.
        data_dir: Its ``log.dirs`` (topics and the KRaft metadata log).
    """
    # a cluster of 3 keeps every internal topic on all nodes and needs 2 in
    # sync: one node may die without stopping transactions or commits
    replicas = info.replicas
    min_isr = 2 if replicas >= 3 else 1
    quorum = (
        {
            "controller.quorum.voters": info.voters,
            # the controller fences a dead broker (and moves its partition
            # leaders) after 3 s without heartbeats, not Kafka's 9 s
            "broker.session.timeout.ms": 3000,
            "broker.heartbeat.interval.ms": 500,
        }
        if info.voters
        else {
            "controller.quorum.bootstrap.servers": f"{info.host}:{info.controller_port}"
        }
    )
    settings: dict[str, Any] = {
        "process.roles": "broker,controller",
        "node.id": info.node_id,
        **quorum,
        "listeners": (
            f"PLAINTEXT://{info.host}:{info.port},"
            f"CONTROLLER://{info.host}:{info.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{info.host}:{info.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": data_dir,
        "num.partitions": 1,
        # a missing topic is an error a user should see, not a silent create
        "auto.create.topics.enable": "false",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        "log.retention.check.interval.ms": 5000,
    }
    lines = ["# Written by sr3_cli.daemons.kafka; rewritten at every start."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"
