"""The last output per key of a topology's sinks, comparable across engines.

A sink is a component nothing subscribes to. More generally, every output
stream nothing subscribes to is an output of the topology: a bolt whose
``default`` stream goes nowhere but whose ``alerts`` stream feeds another bolt
still outputs its ``default`` tuples. An output is reported under the
component id for the ``default`` stream and under ``component:stream`` for
another stream. Its tuples are keyed by the values of the component's key
fields (``sr3.output.key.fields``, default: the stream's first field; any
output but a sink's ``default`` stream is keyed by its first field when it
lacks one of the key fields) and only the last tuple per key is kept. Replays
after a rollback simply overwrite what the aborted epoch emitted, so two
engines that process the same input exactly once agree on the result even
though they emit a different number of intermediate tuples. Storm's system
streams (``__`` prefix) are never outputs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sr3.config import KEYS
from sr3.errors import ConfigError
from topology_api.barriers import internal_stream
from topology_api.topology import LoadedTopology

__all__ = [
    "DEFAULT_STREAM",
    "KEY_FIELDS_KEY",
    "LastOutputs",
    "key_json",
    "output_key_indexes",
    "output_name",
    "output_streams",
    "sink_components",
]

#: Component conf key naming the key fields of a sink's output tuples.
KEY_FIELDS_KEY: Final = "sr3.output.key.fields"
#: The stream reported under the bare component id.
DEFAULT_STREAM: Final = "default"


def sink_components(topology: LoadedTopology) -> tuple[str, ...]:
    """Return the ids of the components nothing subscribes to, in definition order.

    A spout no bolt reads counts as a sink too.
    """
    sources = {
        sub.source for comp in topology.components.values() for sub in comp.inputs
    }
    return tuple(name for name in topology.components if name not in sources)


def output_streams(topology: LoadedTopology) -> tuple[tuple[str, str], ...]:
    """Return the ``(component, stream)`` pairs nothing subscribes to.

    In definition order, then stream declaration order; system streams
    (``__`` prefix) are left out.
    """
    subscribed = {
        (sub.source, sub.stream)
        for comp in topology.components.values()
        for sub in comp.inputs
    }
    return tuple(
        (name, stream)
        for name, comp in topology.components.items()
        for stream in comp.outputs
        if not internal_stream(stream) and (name, stream) not in subscribed
    )


def output_name(component: str, stream: str) -> str:
    """Return the report name of an output: the component id, plus ``:stream``."""
    return component if stream == DEFAULT_STREAM else f"{component}:{stream}"


def output_key_indexes(
    topology: LoadedTopology,
    component: str,
    conf: Mapping[str, Any],
    stream: str = DEFAULT_STREAM,
    *,
    lenient: bool = False,
) -> tuple[int, ...]:
    """Return the indexes of a component's key fields in a stream's fields.

    The key fields come from ``sr3.output.key.fields`` (a list of names or a
    comma-separated string) in the component's own spec config, else in
    ``conf``; by default they are the first field of the stream. A stream
    without fields and without the key set has the empty key. A stream other
    than ``default`` that lacks one of the key fields (any stream, when
    ``lenient``) is keyed by its first field.

    Args:
        topology: The loaded topology.
        component: Component id.
        conf: Topology-wide Storm conf (the component's config overrides it).
        stream: The output stream (``default`` unless told).
        lenient: Key a ``default`` stream lacking a key field by its first
            field instead of refusing it (a bolt whose other streams are read).

    Raises:
        KeyError: the topology has no such component.
        ConfigError: the key names a field the default stream does not declare
            (and not ``lenient``), or is not a list of names nor a
            comma-separated string.
    """
    comp = topology.components[component]
    declared = comp.outputs.get(stream)
    fields = declared.fields if declared is not None else ()
    first = (0,) if fields else ()
    raw = comp.config.get(KEY_FIELDS_KEY, conf.get(KEY_FIELDS_KEY))
    names = KEYS[KEY_FIELDS_KEY].parse(raw, where=f"component {component!r}:")
    if names is None:
        return first
    lax = lenient or stream != DEFAULT_STREAM
    if lax and not all(name in fields for name in names):
        return first
    indexes = []
    for name in names:
        if name not in fields:
            msg = (
                f"component {component!r}: {KEY_FIELDS_KEY} names field {name!r}, "
                f"which its {DEFAULT_STREAM!r} stream does not declare; valid "
                f"fields: {list(fields)}"
            )
            raise ConfigError(msg)
        indexes.append(fields.index(name))
    return tuple(indexes)


def key_json(values: Sequence[Any], indexes: Iterable[int]) -> str:
    """Return the key of an output tuple: ``json.dumps`` of its key values.

    A key index past the end of a short tuple contributes ``null``; values JSON
    cannot encode are written with ``repr`` so a bad emit never breaks a run.
    """
    key = [values[i] if i < len(values) else None for i in indexes]
    return json.dumps(key, default=repr)


class LastOutputs:
    """The last output tuple per key of each output of a topology (thread-safe).

    Tracked: every stream nothing subscribes to (:func:`output_streams`), and
    every sink, even one that declares no ``default`` stream.

    Args:
        topology: The loaded topology; its outputs are tracked.
        conf: Topology-wide Storm conf (each component's config overrides it).

    Raises:
        ConfigError: an output's ``sr3.output.key.fields`` is invalid.
    """

    def __init__(
        self, topology: LoadedTopology, conf: Mapping[str, Any] | None = None
    ) -> None:
        sinks = [(name, DEFAULT_STREAM) for name in sink_components(topology)]
        pairs = sinks + [p for p in output_streams(topology) if p not in sinks]
        # a key set for the whole topology need not fit a bolt whose other
        # streams are read: its default stream then falls back to field one
        self._indexes = {
            (name, stream): output_key_indexes(
                topology, name, conf or {}, stream, lenient=(name, stream) not in sinks
            )
            for name, stream in pairs
        }
        self._last: dict[tuple[str, str], dict[str, list[Any]]] = {
            pair: {} for pair in self._indexes
        }
        self._lock = threading.Lock()

    @property
    def components(self) -> tuple[str, ...]:
        """The tracked outputs' report names (see :func:`output_name`)."""
        return tuple(output_name(*pair) for pair in self._indexes)

    def add(self, component: str, stream: str, values: Sequence[Any]) -> None:
        """Record an emitted tuple; it replaces the previous one with its key.

        Tuples of streams that are not outputs (a stream some bolt subscribes
        to, the checkpoint barrier stream) are ignored.
        """
        indexes = self._indexes.get((component, stream))
        if indexes is None:
            return
        key = key_json(values, indexes)
        with self._lock:
            self._last[(component, stream)][key] = list(values)

    def to_dict(self) -> dict[str, dict[str, list[Any]]]:
        """Return ``{output name: {json key: values}}``, names and keys sorted."""
        with self._lock:
            named = {output_name(*pair): last for pair, last in self._last.items()}
            return {
                name: {key: list(last[key]) for key in sorted(last)}
                for name, last in sorted(named.items())
            }
