"""The Python functions Spark runs for stateless bolts and for keying stateful ones.

Each stage is a picklable callable holding plain data (a :class:`ComponentRef`,
the bolt's subscriptions and a :class:`Routing`); the first call in a Spark task
loads the topology and hosts the bolt (task index = Spark partition id). Every
stage reads :data:`spark_bridge.rows.ROW_SCHEMA` rows and passes on the rows it
does not consume: every non-emit row, and the emit rows :class:`Routing` keeps.

- :class:`BoltStage` (``mapInPandas``): a stateless bolt over the emits it
  subscribes to, in arrival order; an ALL subscription runs the tuple through
  one hosted bolt per task index.
- :class:`KeyStage` (``mapInPandas``): before a stateful bolt, adds the group
  column ``gkey``: the fields-grouping key (``encode_key``) of each emit the bolt
  subscribes to and of its restore rows, and a pseudo key (a zero byte and a
  spread byte, never a msgpack array) for the rows it passes through.

The stateful stage itself is :mod:`spark_bridge.keyed`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd

from spark_bridge.errors import ComponentError
from spark_bridge.hosting import BoltHost, loaded_topology, spark_task, storm_conf
from spark_bridge.rows import COLUMNS, DEAD, EMIT, RESTORE, ComponentRef
from sr3.codec import decode_value, encode_key, encode_value
from sr3.errors import ConfigError
from sr3.state import KeyState
from storm_bridge.topology import LoadedTopology

__all__ = [
    "GROUP_COLUMN",
    "KEYED_SCHEMA",
    "ON_ERROR_KEY",
    "ON_ERROR_POLICIES",
    "BoltStage",
    "BoltStageBase",
    "FusedStages",
    "KeyStage",
    "Routing",
    "error_policy",
    "frame_of",
    "is_pseudo_key",
]

Row = tuple[Any, ...]

#: Conf key choosing what a bolt's exception does.
ON_ERROR_KEY: Final = "sr3.on.error"
#: Allowed values of ``sr3.on.error``: fail the query, or divert to a dead row.
ON_ERROR_POLICIES: Final = ("fail", "dead-letter")
#: The column a stateful stage groups by (real key or pass-through pseudo key).
GROUP_COLUMN: Final = "gkey"
#: Schema of a :class:`KeyStage`'s output.
KEYED_SCHEMA: Final = (
    "component string, stream string, kind string, values binary, key binary, "
    f"state binary, seq string, {GROUP_COLUMN} binary"
)
_PSEUDO_PREFIX: Final = b"\x00"
#: Pass-through rows spread over this many pseudo keys (so over partitions).
_PSEUDO_SPREAD: Final = 16
_ALL: Final = "ALL"


def error_policy(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> str:
    """Return the ``sr3.on.error`` policy of ``component`` (default ``"fail"``).

    Raises:
        ConfigError: the merged conf holds another value.
    """
    value = storm_conf(topology, component, overrides).get(ON_ERROR_KEY, "fail")
    if value not in ON_ERROR_POLICIES:
        msg = (
            f"component {component!r}: {ON_ERROR_KEY}={value!r} is not one of "
            f"{', '.join(ON_ERROR_POLICIES)}; fix the topology or component config"
        )
        raise ConfigError(msg)
    return str(value)


def is_pseudo_key(gkey: bytes) -> bool:
    """Return whether ``gkey`` is a pass-through pseudo key, not a state key."""
    return gkey[:1] == _PSEUDO_PREFIX


def frame_of(rows: Sequence[Row]) -> pd.DataFrame:
    """Return ``rows`` as a pandas frame of :data:`COLUMNS`."""
    return pd.DataFrame(list(rows), columns=list(COLUMNS))


@dataclass(frozen=True)
class Routing:
    """Which emit rows a stage passes on to later stages and the sink.

    Attributes:
        streams: ``(component, stream)`` pairs a later bolt subscribes to.
        sinks: Components nothing subscribes to: all their emits reach the sink.
    """

    streams: frozenset[tuple[str, str]]
    sinks: frozenset[str]

    def keeps(self, component: str, stream: str) -> bool:
        """Return whether an emit of ``component`` on ``stream`` is still needed."""
        return component in self.sinks or (component, stream) in self.streams


class BoltStageBase:
    """Hosts the bolt lazily, once per Spark task and task index."""

    def __init__(
        self, ref: ComponentRef, routing: Routing, *, on_error: str | None = None
    ) -> None:
        self.ref = ref
        self.routing = routing
        topology = loaded_topology(ref.topology_path)
        info = topology.components[ref.component]
        self.inputs = {
            (sub.source, sub.stream): sub.grouping.kind.value for sub in info.inputs
        }
        self.tasks = info.tasks
        self.on_error = on_error or error_policy(topology, ref.component, ref.conf)
        self._hosts: dict[int, BoltHost] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hosts": {}}

    def host(self, index: int | None = None) -> BoltHost:
        """Return the hosted bolt of task ``index`` (default: this partition's)."""
        if index is None:
            index = spark_task()[0]
        host = self._hosts.get(index)
        if host is None:
            topology = loaded_topology(self.ref.topology_path)
            host = BoltHost(topology, self.ref.component, index, self.ref.conf)
            self._hosts[index] = host
        return host

    def process(
        self,
        hosts: Sequence[BoltHost],
        row: Row,
        *,
        key: bytes | None,
        where: str,
        scoped: KeyState | None = None,
    ) -> tuple[list[Row], bool]:
        """Run the emit ``row`` through ``hosts``; return output rows and failure.

        The output is the bolt's kept emits (seq ``f"{seq}.{j:06d}"``) or, when
        ``process`` raised under the dead-letter policy, one dead row. With
        ``scoped`` (a stateful bolt's key state) ``process`` runs directly with
        ``self.state`` bound to it.

        Raises:
            ComponentError: ``process`` raised under the fail policy.
        """
        source, stream, encoded, seq = row[0], row[1], row[3], row[6] or ""
        name = self.ref.component
        values = decode_value(encoded)
        emitted: list[Row] = []
        try:
            for host in hosts:
                tup = host.make_tuple(source, stream, values)
                if scoped is None:
                    emits = host.process(tup)
                else:
                    emits = host.process_keyed(tup, scoped)
                for emit in emits:
                    j = len(emitted)
                    emitted.append(
                        (name, emit.stream, EMIT, encode_value(emit.values))
                        + (None, None, f"{seq}.{j:06d}")
                    )
        except ComponentError:
            raise
        except Exception as exc:
            index, batch = spark_task()
            if self.on_error != "dead-letter":
                msg = (
                    f"bolt {name!r} failed on tuple {values!r} from {source!r}/"
                    f"{stream!r} ({where}partition {index}, batch {batch}): "
                    f"{type(exc).__name__}: {exc}; fix process() and restart the "
                    f"query from the same checkpoint, or set {ON_ERROR_KEY}="
                    "dead-letter to divert failing tuples to dead rows"
                )
                raise ComponentError(msg) from exc
            report = {
                "source": source,
                "stream": stream,
                "error": f"{type(exc).__name__}: {exc}",
                "batch": batch,
                "partition": index,
            }
            dead = (name, stream, DEAD, encoded, key, encode_value(report), seq)
            return [dead], True
        kept = [r for r in emitted if self.routing.keeps(name, r[1])]
        return kept, False


class BoltStage(BoltStageBase):
    """``mapInPandas`` function of a stateless bolt."""

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Run the bolt on the emits it subscribes to; pass the rest on."""
        for frame in frames:
            out: list[Row] = []
            for row in frame.itertuples(index=False, name=None):
                component, stream, kind = row[0], row[1], row[2]
                if kind != EMIT:
                    out.append(row)
                    continue
                if self.routing.keeps(component, stream):
                    out.append(row)
                grouping = self.inputs.get((component, stream))
                if grouping is None:
                    continue
                if grouping == _ALL:
                    hosts = [self.host(i) for i in range(self.tasks)]
                else:
                    hosts = [self.host()]
                emitted, _failed = self.process(hosts, row, key=None, where="")
                out.extend(emitted)
            yield frame_of(out)


class FusedStages:
    """One ``mapInPandas`` function running several stages one after another.

    Consecutive stateless bolts, and the keying of the stateful bolt after them,
    run in one Python pass per partition: rows go from stage to stage as pandas
    frames without a round trip through the JVM and Arrow in between.
    """

    def __init__(self, stages: Sequence[Any]) -> None:
        self.stages = list(stages)

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Run every stage over the partition's frames, in order."""
        for stage in self.stages:
            frames = stage(frames)
        yield from frames


class KeyStage:
    """``mapInPandas`` function adding the group column before a stateful bolt."""

    def __init__(self, ref: ComponentRef, routing: Routing) -> None:
        self.component = ref.component
        self.routing = routing
        topology = loaded_topology(ref.topology_path)
        fields: dict[tuple[str, str], tuple[int, ...]] = {}
        for sub in topology.components[ref.component].inputs:
            names = topology.components[sub.source].outputs[sub.stream].fields
            fields[(sub.source, sub.stream)] = tuple(
                names.index(f) for f in sub.grouping.fields
            )
        self.fields = fields

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Key the bolt's input and restore rows; pseudo-key what passes through."""
        spread = 0
        for frame in frames:
            out: list[Row] = []
            for row in frame.itertuples(index=False, name=None):
                component, stream, kind = row[0], row[1], row[2]
                indexes = self.fields.get((component, stream))
                passes = kind != EMIT or self.routing.keeps(component, stream)
                if kind == EMIT and indexes is not None:
                    decoded = decode_value(row[3])
                    key = encode_key(tuple(decoded[i] for i in indexes))
                    out.append((*row[:4], key, row[5], row[6], key))
                elif kind == RESTORE and component == self.component:
                    out.append((*row, row[4]))
                    passes = False
                if passes:
                    spread = (spread + 1) % _PSEUDO_SPREAD
                    out.append((*row, _PSEUDO_PREFIX + bytes([spread])))
            yield pd.DataFrame(out, columns=[*COLUMNS, GROUP_COLUMN])
