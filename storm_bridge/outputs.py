"""The last output per key of a topology's sinks, comparable across engines.

A sink is a component nothing subscribes to. Its output tuples are keyed by the
values of its key fields (``sr3.output.key.fields``, default: the first output
field of its ``default`` stream) and only the last tuple per key is kept. Replays
after a rollback simply overwrite what the aborted epoch emitted, so two engines
that process the same input exactly once agree on the result even though they
emit a different number of intermediate tuples.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sr3.errors import ConfigError
from storm_bridge.topology import LoadedTopology

__all__ = [
    "DEFAULT_STREAM",
    "KEY_FIELDS_KEY",
    "LastOutputs",
    "key_json",
    "output_key_indexes",
    "sink_components",
]

#: Component conf key naming the key fields of a sink's output tuples.
KEY_FIELDS_KEY: Final = "sr3.output.key.fields"
#: The only stream whose tuples count as a component's output.
DEFAULT_STREAM: Final = "default"


def sink_components(topology: LoadedTopology) -> tuple[str, ...]:
    """Return the ids of the components nothing subscribes to, in definition order.

    A spout no bolt reads counts as a sink too.
    """
    sources = {
        sub.source for comp in topology.components.values() for sub in comp.inputs
    }
    return tuple(name for name in topology.components if name not in sources)


def _key_field_names(component: str, raw: Any) -> list[str]:
    if isinstance(raw, str):
        names = [name.strip() for name in raw.split(",")]
    elif isinstance(raw, list | tuple) and all(isinstance(n, str) for n in raw):
        names = [name.strip() for name in raw]
    else:
        msg = (
            f"component {component!r}: {KEY_FIELDS_KEY}={raw!r} must be a list of "
            "field names or a comma-separated string"
        )
        raise ConfigError(msg)
    if not names or not all(names):
        msg = (
            f"component {component!r}: {KEY_FIELDS_KEY}={raw!r} names an empty "
            "field; write e.g. 'word' or ['word', 'day']"
        )
        raise ConfigError(msg)
    return names


def output_key_indexes(
    topology: LoadedTopology, component: str, conf: Mapping[str, Any]
) -> tuple[int, ...]:
    """Return the indexes of a component's key fields in its default-stream fields.

    The key fields come from ``sr3.output.key.fields`` (a list of names or a
    comma-separated string) in the component's own spec config, else in
    ``conf``; by default they are the first output field. A component without
    default-stream fields and without the key set has the empty key.

    Args:
        topology: The loaded topology.
        component: Component id.
        conf: Topology-wide Storm conf (the component's config overrides it).

    Raises:
        KeyError: the topology has no such component.
        ConfigError: the key names a field the default stream does not declare,
            or is not a list of names nor a comma-separated string.
    """
    comp = topology.components[component]
    stream = comp.outputs.get(DEFAULT_STREAM)
    fields = stream.fields if stream is not None else ()
    raw = comp.config.get(KEY_FIELDS_KEY, conf.get(KEY_FIELDS_KEY))
    if raw is None:
        return (0,) if fields else ()
    indexes = []
    for name in _key_field_names(component, raw):
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
    """The last output tuple per key of each sink of a topology (thread-safe).

    Args:
        topology: The loaded topology; its sinks are tracked.
        conf: Topology-wide Storm conf (each component's config overrides it).

    Raises:
        ConfigError: a sink's ``sr3.output.key.fields`` is invalid.
    """

    def __init__(
        self, topology: LoadedTopology, conf: Mapping[str, Any] | None = None
    ) -> None:
        self._indexes = {
            name: output_key_indexes(topology, name, conf or {})
            for name in sink_components(topology)
        }
        self._last: dict[str, dict[str, list[Any]]] = {c: {} for c in self._indexes}
        self._lock = threading.Lock()

    @property
    def components(self) -> tuple[str, ...]:
        """The tracked component ids."""
        return tuple(self._indexes)

    def add(self, component: str, stream: str, values: Sequence[Any]) -> None:
        """Record an emitted tuple; it replaces the previous one with its key.

        Tuples of untracked components and of streams other than ``default``
        (the checkpoint barrier stream among them) are ignored.
        """
        indexes = self._indexes.get(component)
        if indexes is None or stream != DEFAULT_STREAM:
            return
        key = key_json(values, indexes)
        with self._lock:
            self._last[component][key] = list(values)

    def to_dict(self) -> dict[str, dict[str, list[Any]]]:
        """Return ``{component: {json key: values}}``, components and keys sorted."""
        with self._lock:
            return {
                component: {key: list(last[key]) for key in sorted(last)}
                for component, last in sorted(self._last.items())
            }
