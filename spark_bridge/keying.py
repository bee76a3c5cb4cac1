"""Keying before a stateful bolt: one packed row per group key and record batch.

:class:`KeyStage` gives each row its group key ``gkey``: the fields-grouping
key (``encode_key``) of each emit the stateful bolt subscribes to (its state
key when the bolt overrides ``state_key``, see :mod:`spark_bridge.statekeys`)
and of its restore rows, and a pseudo key (a zero byte and a spread byte,
never a msgpack array) for the rows it passes through. It yields
:data:`KEYED_SCHEMA` rows: per group key, a msgpack array of that key's rows
(:func:`pack`), so the shuffle and sort before the stateful stage move one row
per key and record batch instead of one per tuple. For a bolt Storm ticks, a
partition's last output adds a tick row under each tick key
(:mod:`spark_bridge.ticks`). The stateful stage is :mod:`spark_bridge.keyed`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Final

import pyarrow as pa

from spark_bridge.component_traits import ticks
from spark_bridge.rows import EMIT, RESTORE, TICK, ComponentRef, Routing, Row
from spark_bridge.statekeys import StateKeys
from spark_bridge.ticks import shuffle_partitions, tick_keys
from spark_bridge.worker import topology_of
from sr3.codec import decode_value, encode_key, encode_value
from topology_api.contract import overrides_state_key

__all__ = [
    "GROUP_COLUMN",
    "KEYED_ARROW_SCHEMA",
    "KEYED_SCHEMA",
    "ROWS_COLUMN",
    "KeyStage",
    "is_pseudo_key",
    "pack",
    "unpack",
]

#: The column a stateful stage groups by (real key or pass-through pseudo key).
GROUP_COLUMN: Final = "gkey"
#: The column holding a packed msgpack array of one group key's rows.
ROWS_COLUMN: Final = "rows"
#: Schema of a :class:`KeyStage`'s output.
KEYED_SCHEMA: Final = f"{GROUP_COLUMN} binary, {ROWS_COLUMN} binary"
#: :data:`KEYED_SCHEMA` as an Arrow schema.
KEYED_ARROW_SCHEMA: Final = pa.schema(
    [(GROUP_COLUMN, pa.binary()), (ROWS_COLUMN, pa.binary())]
)
_PSEUDO_PREFIX: Final = b"\x00"
#: Pass-through rows spread over this many pseudo keys (so over partitions).
_PSEUDO_SPREAD: Final = 16
_PSEUDO_KEYS: Final = tuple(_PSEUDO_PREFIX + bytes([i]) for i in range(_PSEUDO_SPREAD))
#: A packed row holds at most this many rows.
_PACK_ROWS: Final = 4096


def is_pseudo_key(gkey: bytes) -> bool:
    """Return whether ``gkey`` is a pass-through pseudo key, not a state key."""
    return gkey[:1] == _PSEUDO_PREFIX


def pack(rows: Sequence[Row]) -> bytes:
    """Return ``rows`` as one msgpack array (a :data:`ROWS_COLUMN` value)."""
    return encode_value(rows)


def unpack(blob: bytes) -> list[Row]:
    """Return the rows :func:`pack` packed, as tuples."""
    return [tuple(row) for row in decode_value(blob)]


def _packed(groups: Mapping[bytes, list[Row]]) -> list[Row]:
    """Return ``(gkey, pack(rows))`` rows, at most ``_PACK_ROWS`` rows a pack."""
    out: list[Row] = []
    for gkey, rows in groups.items():
        for first in range(0, len(rows), _PACK_ROWS):
            out.append((gkey, pack(rows[first : first + _PACK_ROWS])))
    return out


class KeyStage:
    """Groups the rows before a stateful bolt by key (a :class:`Stage`)."""

    def __init__(
        self,
        ref: ComponentRef,
        routing: Routing,
        *,
        partitions: int = 200,
        on_error: str = "fail",
    ) -> None:
        self.component = ref.component
        self.routing = routing
        topology = topology_of(ref)
        #: a bolt overriding ``state_key``: its group key is the state key
        #: (:mod:`spark_bridge.statekeys`); None: the grouping values
        self.keys: StateKeys | None = None
        if overrides_state_key(topology.components[ref.component].component_cls):
            self.keys = StateKeys(ref, on_error=on_error)
        #: whether the bolt gets tick tuples (one tick row per Spark partition)
        self.ticked = ticks(topology, ref.component, ref.conf)
        #: the driver's shuffle partitions, if the tasks are not told theirs
        self.partitions = partitions
        #: (source, stream) -> (field indexes of the key, the stream's width
        #: when the key is all of its fields in order, else -1)
        fields: dict[tuple[str, str], tuple[tuple[int, ...], int]] = {}
        for sub in topology.components[ref.component].inputs:
            names = topology.components[sub.source].outputs[sub.stream].fields
            indexes = tuple(names.index(f) for f in sub.grouping.fields)
            whole = indexes == tuple(range(len(names)))
            fields[(sub.source, sub.stream)] = (indexes, len(names) if whole else -1)
        self.fields = fields

    def rows(self, batches: Iterator[list[Row]]) -> Iterator[list[Row]]:
        """Key the bolt's input and restore rows; pseudo-key what passes through.

        Yields :data:`KEYED_SCHEMA` rows: ``(gkey, pack(rows of that key))``.
        """
        spread = 0
        fields = self.fields
        keeps = self.routing.keeps
        keys = self.keys
        seen = False
        for batch in batches:
            seen = True
            groups: dict[bytes, list[Row]] = {}
            for row in batch:
                component, stream, kind = row[0], row[1], row[2]
                subscribed = fields.get((component, stream))
                passes = kind != EMIT or keeps(component, stream)
                if kind == EMIT and subscribed is not None and keys is not None:
                    gkey = keys.group_key(row)
                    if isinstance(gkey, bytes):
                        groups.setdefault(gkey, []).append(row)
                    else:  # state_key() failed: a dead row passes through
                        spread = (spread + 1) % _PSEUDO_SPREAD
                        groups.setdefault(_PSEUDO_KEYS[spread], []).append(gkey)
                elif kind == EMIT and subscribed is not None:
                    encoded = row[3]
                    decoded = decode_value(encoded)
                    indexes, width = subscribed
                    if len(decoded) == width:
                        # the key is every value in order: encode_key of the
                        # values is the same msgpack array as encode_value's
                        key = encoded
                    else:
                        key = encode_key(tuple(decoded[i] for i in indexes))
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = []
                    # the stateful stage takes the key from gkey, not the row
                    group.append(row)
                elif kind == RESTORE and component == self.component:
                    groups.setdefault(row[4], []).append(row)
                    passes = False
                if passes:
                    spread = (spread + 1) % _PSEUDO_SPREAD
                    groups.setdefault(_PSEUDO_KEYS[spread], []).append(row)
            yield _packed(groups)
        if seen and self.ticked:
            tick = pack([(self.component, "", TICK, None, None, None, "")])
            ticking = tick_keys(shuffle_partitions(self.partitions))
            yield [(key, tick) for key in ticking]
