"""A small Thrift client for Apache Storm's Nimbus: cluster summary, readiness.

Nimbus serves Thrift over framed transport and the binary protocol (Storm's
default ``SimpleTransportPlugin``). streamparse bundles a ``storm.thrift`` from
Storm 1.x; the calls used here (``getClusterInfo``, ``killTopologyWithOpts``)
and the required fields of their structs are unchanged in Storm 2.x, and
thriftpy2 skips the fields Storm 2 added, so that definition serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TApplicationException, TException
from thriftpy2.transport import TFramedTransportFactory, TTransportException

from storm_bridge.errors import StormBridgeError

__all__ = [
    "ClusterSummary",
    "NimbusClient",
    "NimbusStatus",
    "NimbusUnreachableError",
    "SupervisorStatus",
    "TopologyStatus",
]

_DEFAULT_TIMEOUT_S: Final = 5.0

E_UNREACHABLE = (
    "Nimbus at {address} is not reachable ({exc}); start the lab's Storm cluster "
    "with `sr3 lab up --storm`, or pass the address of a running Nimbus"
)


class NimbusUnreachableError(StormBridgeError, ConnectionError):
    """Nimbus did not answer a Thrift call (not running, wrong address, busy)."""

    retriable = True


@dataclass(frozen=True)
class NimbusStatus:
    """One Nimbus as the cluster summary lists it."""

    host: str
    port: int
    leader: bool
    uptime_s: int
    version: str


@dataclass(frozen=True)
class SupervisorStatus:
    """One supervisor: its slots (worker ports) and how many run a worker."""

    supervisor_id: str
    host: str
    slots: int
    used_slots: int
    uptime_s: int
    version: str

    @property
    def free_slots(self) -> int:
        """Slots with no worker."""
        return self.slots - self.used_slots


@dataclass(frozen=True)
class TopologyStatus:
    """One submitted topology."""

    topology_id: str
    name: str
    status: str
    workers: int
    executors: int
    tasks: int
    uptime_s: int


@dataclass(frozen=True)
class ClusterSummary:
    """What ``getClusterInfo`` returns, as plain values."""

    nimbuses: tuple[NimbusStatus, ...]
    supervisors: tuple[SupervisorStatus, ...]
    topologies: tuple[TopologyStatus, ...]

    @property
    def leader(self) -> NimbusStatus | None:
        """The leading Nimbus, if one leads (it alone accepts topologies)."""
        return next((n for n in self.nimbuses if n.leader), None)

    def topology(self, name: str) -> TopologyStatus | None:
        """Return the running topology called ``name``, if any."""
        return next((t for t in self.topologies if t.name == name), None)


def _summary(raw: Any) -> ClusterSummary:
    return ClusterSummary(
        nimbuses=tuple(
            NimbusStatus(
                host=n.host,
                port=n.port,
                leader=bool(n.isLeader),
                uptime_s=n.uptime_secs,
                version=n.version or "",
            )
            for n in raw.nimbuses or ()
        ),
        supervisors=tuple(
            SupervisorStatus(
                supervisor_id=s.supervisor_id,
                host=s.host,
                slots=s.num_workers,
                used_slots=s.num_used_workers,
                uptime_s=s.uptime_secs,
                version=s.version or "",
            )
            for s in raw.supervisors or ()
        ),
        topologies=tuple(
            TopologyStatus(
                topology_id=t.id,
                name=t.name,
                status=t.status,
                workers=t.num_workers,
                executors=t.num_executors,
                tasks=t.num_tasks,
                uptime_s=t.uptime_secs,
            )
            for t in raw.topologies or ()
        ),
    )


class NimbusClient:
    """Calls Nimbus over Thrift; one connection per call (Nimbus may restart).

    Args:
        host: Nimbus's host.
        port: Its ``nimbus.thrift.port``.
        timeout_s: Connect and read timeout of each call.
    """

    def __init__(
        self, host: str, port: int, *, timeout_s: float = _DEFAULT_TIMEOUT_S
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"NimbusClient({self.address!r})"

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @contextmanager
    def _client(self) -> Iterator[Any]:
        from streamparse.thrift import Nimbus  # noqa: PLC0415 (parses storm.thrift: only when used)

        try:
            client = make_client(
                Nimbus,
                host=self.host,
                port=self.port,
                proto_factory=TBinaryProtocolFactory(),  # type: ignore[no-untyped-call]
                trans_factory=TFramedTransportFactory(),
                timeout=int(self.timeout_s * 1000),
            )
        except (TTransportException, OSError) as exc:
            msg = E_UNREACHABLE.format(address=self.address, exc=exc)
            raise NimbusUnreachableError(msg) from exc
        try:
            yield client
        except (TTransportException, TApplicationException, OSError) as exc:
            msg = E_UNREACHABLE.format(address=self.address, exc=exc)
            raise NimbusUnreachableError(msg) from exc
        finally:
            client.close()

    def cluster_summary(self) -> ClusterSummary:
        """Return nimbuses, supervisors (with slots) and topologies.

        Raises:
            NimbusUnreachableError: Nimbus did not answer.
        """
        with self._client() as client:
            return _summary(client.getClusterInfo())

    def kill_topology(self, name: str, *, wait_s: int = 0) -> None:
        """Kill topology ``name``, its workers stopping after ``wait_s`` s.

        Raises:
            NimbusUnreachableError: Nimbus did not answer.
            StormBridgeError: Nimbus refused (no such topology, not authorised).
        """
        from streamparse.thrift import KillOptions  # noqa: PLC0415 (see _client)

        with self._client() as client:
            try:
                client.killTopologyWithOpts(name, KillOptions(wait_secs=wait_s))
            except TException as exc:
                msg = (
                    f"Nimbus at {self.address} refused to kill topology {name!r}: "
                    f"{exc!r}; `sr3 status` lists the running topologies"
                )
                raise StormBridgeError(msg) from exc
