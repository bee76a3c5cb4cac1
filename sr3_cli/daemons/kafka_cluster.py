"""A multi-node Apache Kafka cluster (KRaft, combined nodes) for the lab and tests.

Every node is a :class:`~sr3_cli.daemons.kafka.KafkaBroker` in ``broker-<id>/``
under the cluster's root, running both roles (broker and controller); the
controllers form one static quorum (``controller.quorum.voters``) of all nodes.
Combined, not dedicated, controllers: three JVMs instead of six on a lab
machine, and a quorum of three still has a majority when one node dies, which
is the failure a three-node lab exists to show. Internal topics (transactions,
consumer offsets) get replication factor 3 and ``min.insync.replicas`` 2, as
do topics created without an explicit factor. Layout::

    cluster.json        {"brokers": N}
    broker-1/ ...       one KafkaBroker each (broker.json, data/, logs/)

Every node is launched before any is waited for: a node answers only once a
majority of the controllers runs.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any, Final

from sr3.net import free_port
from sr3_cli.daemons.kafka import KafkaBroker
from sr3_cli.daemons.kafka_config import BrokerInfo, new_cluster_id
from sr3_cli.daemons.kafka_home import KafkaBrokerError, KafkaHome, pinned_version

__all__ = ["KafkaCluster"]

_STATE: Final = "cluster.json"
_POLL_S: Final = 0.2


class KafkaCluster:
    """``brokers`` combined KRaft nodes on 127.0.0.1, one static quorum.

    Args:
        root: Holds ``cluster.json`` and one ``broker-<id>/`` per node.
        brokers: How many nodes (an odd number keeps a clear majority).
        heap: Each JVM's ``-Xmx`` (default ``384m``).
        detached: Start the JVMs in their own sessions (the lab's do).
        start_timeout_s: How long :meth:`start` waits for every node.
        home: The fetched Kafka (default: located on first use).

    Raises:
        KafkaBrokerError: ``root`` holds a cluster of another size.
    """

    def __init__(  # noqa: PLR0913 (keyword-only options)
        self,
        root: Path,
        *,
        brokers: int = 3,
        heap: str = "384m",
        detached: bool = False,
        start_timeout_s: float = 180.0,
        home: KafkaHome | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        recorded = self._recorded()
        if recorded is not None and recorded != brokers:
            msg = (
                f"{self.root} holds a Kafka cluster of {recorded} brokers, not "
                f"{brokers}: start it with {recorded}, or stop it and delete the dir"
            )
            raise KafkaBrokerError(msg)
        self.start_timeout_s = start_timeout_s
        ports = [(free_port(), free_port()) for _ in range(brokers)]
        voters = ",".join(
            f"{i}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports, 1)
        )
        cluster_id = new_cluster_id()
        self.nodes = [
            KafkaBroker(
                self.root / f"broker-{i}",
                heap=heap,
                detached=detached,
                start_timeout_s=start_timeout_s,
                home=home,
                # used only where no broker.json exists yet (a first start)
                plan=BrokerInfo(port, controller, cluster_id, None, i, voters),
            )
            for i, (port, controller) in enumerate(ports, 1)
        ]

    def __repr__(self) -> str:
        return f"KafkaCluster({str(self.root)!r}, {self.bootstrap})"

    @classmethod
    def attach(cls, root: Path) -> KafkaCluster:
        """Rebuild a cluster another process started from its ``cluster.json``.

        Raises:
            KafkaBrokerError: ``root`` has no ``cluster.json``.
        """
        brokers = cls._read_count(Path(root).resolve())
        if brokers is None:
            msg = f"{root} has no {_STATE}: no Kafka cluster was started there"
            raise KafkaBrokerError(msg)
        return cls(root, brokers=brokers)

    @property
    def home(self) -> KafkaHome:
        """The fetched Kafka the nodes run."""
        return self.nodes[0].home

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated (``sr3.kafka.bootstrap``)."""
        return ",".join(node.bootstrap for node in self.nodes)

    def running(self) -> bool:
        """Whether every node's JVM runs."""
        return all(node.running() for node in self.nodes)

    def start(self) -> str:
        """Launch every node that does not run, then wait until all answer.

        Returns:
            The bootstrap address list.

        Raises:
            KafkaMissingError: the jars or java are missing.
            KafkaBrokerError: a node did not start; the others are stopped.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / _STATE).write_text(
            json.dumps({"brokers": len(self.nodes)}), encoding="utf-8"
        )
        deadline = time.monotonic() + self.start_timeout_s
        waiting = [node for node in self.nodes if not node.running()]
        try:
            for node in waiting:
                node.launch(deadline)
            for node in waiting:
                node.wait_ready(deadline)
            self._wait_registered(deadline)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        """SIGTERM every node at once (a node alone cannot finish without quorum)."""
        threads = [
            threading.Thread(target=node.stop, daemon=True) for node in self.nodes
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every node's logs."""
        return "\n".join(
            f"-- broker {i}:\n{node.log_tail(lines)}"
            for i, node in enumerate(self.nodes, 1)
        )

    def status(self) -> dict[str, Any]:
        """Return ``{"bootstrap", "pid", "running", "dir", "version", "brokers"}``.

        ``bootstrap`` lists every node; ``pid`` the running nodes' pids;
        ``brokers`` each node's own status.
        """
        nodes = [node.status() for node in self.nodes]
        return {
            "bootstrap": self.bootstrap,
            "pid": [n["pid"] for n in nodes if n["pid"] is not None],
            "running": all(n["running"] for n in nodes),
            "dir": str(self.root),
            "version": pinned_version(),
            "brokers": nodes,
        }

    def _wait_registered(self, deadline: float) -> None:
        """Wait until the metadata lists every node as a broker."""
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 (when started)

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # not answering yet: retried
                if len(admin.list_topics(timeout=1.0).brokers) == len(self.nodes):
                    return
            time.sleep(_POLL_S)  # brokers register with the controller: poll
        msg = (
            f"Kafka cluster in {self.root}: not every broker registered within "
            f"{self.start_timeout_s} s; logs:\n{self.log_tail()}"
        )
        raise KafkaBrokerError(msg)

    def _recorded(self) -> int | None:
        return self._read_count(self.root)

    @staticmethod
    def _read_count(root: Path) -> int | None:
        try:
            raw = json.loads((root / _STATE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            msg = f"{root / _STATE} is unreadable ({exc}); delete the dir to start over"
            raise KafkaBrokerError(msg) from exc
        return int(raw["brokers"])
