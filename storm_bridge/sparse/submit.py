"""Submitting a topology file to Nimbus the way ``sparse submit`` does.

The same Thrift calls as streamparse's ``sparse submit`` (``beginFileUpload``,
``uploadChunk``, ``finishFileUpload``, ``submitTopologyWithOpts`` with the
streamparse ``Topology``'s own ``StormTopology``), from a topology file rather
than a project: the jar holds the file and the modules beside it
(:func:`~storm_bridge.sparse.package.build_jar`), and every Python component
runs ``streamparse_run`` of the virtualenv given (the one running ``sr3``, for
workers on this machine), as ``use_virtualenv`` makes streamparse do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from streamparse.thrift import (
    GlobalStreamId,
    KillOptions,
    Nimbus,
    ShellComponent,
    StreamInfo,
    SubmitOptions,
    TopologyInitialStatus,
    storm_thrift,
)
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TException
from thriftpy2.transport import TFramedTransportFactory, TTransportException

from sr3.config import read_setting
from storm_bridge.apache.nimbus import E_UNREACHABLE, NimbusUnreachableError
from storm_bridge.errors import StormBridgeError
from storm_bridge.generation_field import (
    carries_generation,
    launch_script,
    launch_target,
)
from storm_bridge.messages import HIDDEN_GENERATION_FIELD
from topology_api.barriers import WARMUP_FIELDS, WARMUP_STREAM
from topology_api.topology import STREAMPARSE_RUN, LoadedTopology

#: Key-group routing runs on the local cluster only (docs/rebalance.md).
ROUTING: Final = "sr3.rebalance.routing"

__all__ = [
    "CHUNK_BYTES",
    "NimbusSession",
    "SubmitError",
    "declare_generation_field",
    "declare_warmup",
    "python_components",
    "shell_components",
    "streamparse_run_of",
]

#: Upload chunk, as streamparse's ``THRIFT_CHUNK_SIZE``.
CHUNK_BYTES: Final = 307200
_TIMEOUT_MS: Final = 10000


class SubmitError(StormBridgeError):
    """Nimbus refused a topology, or the topology cannot run on the workers."""


def streamparse_run_of(prefix: Path | None = None) -> Path:
    """Return the ``streamparse_run`` of a virtualenv (default: this one).

    Raises:
        SubmitError: the virtualenv has none.
    """
    venv = Path(sys.prefix if prefix is None else prefix)
    run = venv / "bin" / STREAMPARSE_RUN
    if not run.is_file():
        msg = (
            f"{run} does not exist: the workers run the Python components with the "
            "virtualenv's streamparse_run; install streamparse there (make setup)"
        )
        raise SubmitError(msg)
    return run


def python_components(
    topology: LoadedTopology,
    *,
    run: Path,
    serializer: str,
    generation_field: bool = False,
) -> list[str]:
    """Point every Python component at ``run`` with ``-s serializer``.

    What ``sparse submit`` does with ``use_virtualenv`` and the project's
    ``serializer``; returns the components changed. With ``generation_field``
    (native checkpoint mode), each also declares
    :data:`~storm_bridge.messages.HIDDEN_GENERATION_FIELD` last on every stream
    that carries it and runs through :mod:`storm_bridge.generation_field`,
    with the virtualenv's ``python``, and they are wired for the rollback's
    warm-up (:func:`declare_warmup`); the topology conf must then set
    :data:`~storm_bridge.messages.GENERATION_FIELD_KEY`.
    """
    changed = []
    for name, shell, common in shell_components(topology.topology_class):
        script = str(shell.script)
        # a topology file is imported once per process: a component may carry
        # an earlier call's command (a bench running with and without the field)
        target = launch_target(script)
        if target is None:
            if STREAMPARSE_RUN not in str(shell.execution_command):
                continue
            target = script.rsplit(maxsplit=1)[-1]
        if generation_field:
            shell.execution_command = str(run.parent / "python")
            shell.script = launch_script(serializer, target)
        else:
            shell.execution_command = str(run)
            shell.script = f"-s {serializer} {target}"
        declare_generation_field(common, on=generation_field)
        changed.append(name)
    declare_warmup(topology.topology_class, changed if generation_field else [])
    return changed


def shell_components(topology_class: Any) -> list[tuple[str, ShellComponent, Any]]:
    """Return ``(name, shell, common)`` of a Thrift topology's shell components.

    ``topology_class`` is a streamparse ``Topology`` subclass; Java components
    (no ``ShellComponent``) are left out.
    """
    cls: Any = topology_class
    components = [
        *((n, b.bolt_object.shell, b.common) for n, b in cls.thrift_bolts.items()),
        *((n, s.spout_object.shell, s.common) for n, s in cls.thrift_spouts.items()),
    ]
    return [c for c in components if isinstance(c[1], ShellComponent)]


def declare_generation_field(common: Any, *, on: bool) -> None:
    """Declare (``on``) or drop the hidden field last on a component's streams.

    ``common`` is the component's Thrift ``ComponentCommon``; only the streams
    :func:`~storm_bridge.generation_field.carries_generation` names get it.
    """
    for stream, info in (common.streams or {}).items():
        fields = [f for f in info.output_fields or [] if f != HIDDEN_GENERATION_FIELD]
        if on and carries_generation(stream):
            fields.append(HIDDEN_GENERATION_FIELD)
        info.output_fields = fields


def declare_warmup(topology_class: Any, components: Collection[str]) -> None:
    """Wire the rollback warm-up between the shell ``components`` (none: unwire).

    Each declares :data:`~topology_api.barriers.WARMUP_STREAM`, and each that
    is a bolt subscribes to it from every one of them with ALL grouping (a
    cycle, which Storm allows), so a warm-up reaches every Python bolt task
    (:mod:`storm_bridge.generation_field` says why). ``components`` must run
    through the generation-field wrapper, which keeps warm-ups from the
    component. Any earlier wiring is taken off first.
    """
    named = set(components)
    # new maps, not edits: streamparse's spec of a component may share them
    for name, _shell, common in shell_components(topology_class):
        streams = {
            s: info for s, info in (common.streams or {}).items() if s != WARMUP_STREAM
        }
        if name in named:
            streams[WARMUP_STREAM] = StreamInfo(
                output_fields=list(WARMUP_FIELDS), direct=False
            )
        common.streams = streams
    cls: Any = topology_class
    for name, bolt in cls.thrift_bolts.items():
        inputs = {
            k: g
            for k, g in (bolt.common.inputs or {}).items()
            if k.streamId != WARMUP_STREAM
        }
        if name in named and isinstance(bolt.bolt_object.shell, ShellComponent):
            for source in sorted(named):
                key = GlobalStreamId(componentId=source, streamId=WARMUP_STREAM)
                inputs[key] = storm_thrift.Grouping(all=storm_thrift.NullStruct())
        bolt.common.inputs = inputs


def _address(nimbus: str) -> tuple[str, int]:
    host, sep, port = nimbus.rpartition(":")
    if not sep or not host or not port.isdigit():
        msg = f"--nimbus {nimbus!r} is not HOST:PORT (e.g. 127.0.0.1:6627)"
        raise SubmitError(msg)
    return host, int(port)


@dataclass(frozen=True)
class TopologyRef:
    """A topology Nimbus runs: its name, id and status."""

    name: str
    topology_id: str
    status: str


class NimbusSession:
    """One Thrift connection to Nimbus, with errors that say what to do.

    Args:
        nimbus: ``HOST:PORT`` of Nimbus's Thrift server.
        timeout_ms: Per-call timeout.
    """

    def __init__(self, nimbus: str, *, timeout_ms: int = _TIMEOUT_MS) -> None:
        self.nimbus = nimbus
        self._host, self._port = _address(nimbus)
        self._timeout_ms = timeout_ms

    @contextmanager
    def client(self) -> Iterator[Any]:
        """Yield a connected client; close it after.

        Raises:
            NimbusUnreachableError: no Nimbus answers at the address.
        """
        try:
            client = make_client(
                Nimbus,
                host=self._host,
                port=self._port,
                proto_factory=TBinaryProtocolFactory(),  # type: ignore[no-untyped-call]
                trans_factory=TFramedTransportFactory(),
                timeout=self._timeout_ms,
            )
        except (TTransportException, OSError) as exc:
            msg = E_UNREACHABLE.format(address=self.nimbus, exc=exc)
            raise NimbusUnreachableError(msg) from exc
        try:
            yield client
        except (TTransportException, ConnectionError) as exc:
            msg = E_UNREACHABLE.format(address=self.nimbus, exc=exc)
            raise NimbusUnreachableError(msg) from exc
        finally:
            client.close()

    def topologies(self) -> dict[str, TopologyRef]:
        """Return the topologies Nimbus runs, by name."""
        with self.client() as client:
            info = client.getClusterInfo()
        return {
            t.name: TopologyRef(t.name, t.id, str(t.status))
            for t in info.topologies or []
        }

    def upload(self, jar: Path) -> str:
        """Upload ``jar`` as ``sparse submit`` does; return its location on Nimbus."""
        with self.client() as client, Path(jar).open("rb") as data:
            location = client.beginFileUpload()
            while chunk := data.read(CHUNK_BYTES):
                client.uploadChunk(location, chunk)
            client.finishFileUpload(location)
        return str(location)

    def submit(
        self, topology: LoadedTopology, *, location: str, conf: Mapping[str, Any]
    ) -> str:
        """Submit the topology (active); return its Storm topology id.

        Raises:
            SubmitError: Nimbus refused it (the message says why), or it asks
                for ``sr3.rebalance.routing = key-groups``, which only the
                local cluster runs.
        """
        if read_setting({**topology.config, **conf}, ROUTING) == "key-groups":
            msg = (
                f"topology {topology.name!r} sets {ROUTING} = key-groups, which only "
                "sr3 run's local cluster routes: Storm's fields grouping is hash mod "
                "tasks (key-group routing would need a Java CustomStreamGrouping). "
                f"Submit it with {ROUTING} = fields"
            )
            raise SubmitError(msg)
        cls: Any = topology.topology_class
        options = SubmitOptions(initial_status=TopologyInitialStatus.ACTIVE)
        try:
            with self.client() as client:
                client.submitTopologyWithOpts(
                    name=topology.name,
                    uploadedJarLocation=location,
                    jsonConf=json.dumps(dict(conf)),
                    topology=cls.thrift_topology,
                    options=options,
                )
        except TException as exc:
            if isinstance(exc, TTransportException):
                raise
            reason = getattr(exc, "msg", None) or str(exc)
            msg = f"Nimbus {self.nimbus} refused topology {topology.name!r}: {reason}"
            raise SubmitError(msg) from exc
        ref = self.topologies().get(topology.name)
        if ref is None:
            msg = f"Nimbus {self.nimbus} took {topology.name!r} but does not list it"
            raise SubmitError(msg)
        return ref.topology_id

    def topology_info(self, topology_id: str) -> Any:
        """Return Nimbus's ``TopologyInfo`` (executors, stats, errors)."""
        with self.client() as client:
            return client.getTopologyInfo(topology_id)

    def kill(self, name: str, *, wait_s: int = 0) -> None:
        """Kill a topology (``sparse kill``); a missing one is no error."""
        try:
            with self.client() as client:
                client.killTopologyWithOpts(
                    name=name, options=KillOptions(wait_secs=wait_s)
                )
        except TException as exc:
            if isinstance(exc, TTransportException):
                raise
            if type(exc).__name__ != "NotAliveException":
                raise
