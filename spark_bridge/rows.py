"""The one row shape every stage of a compiled topology reads and writes.

Storm tuples are untyped lists, so the bridge carries them msgpack-encoded
(:func:`sr3.codec.encode_value`) in a binary column. A row is either an emit
(``kind = "emit"``: ``component`` emitted ``values`` on ``stream``; ``key`` is set
on the way into a stateful bolt) or a state row (``kind = "state"``: after a
micro-batch, ``component``'s state of ``key`` is ``state``; null when deleted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "COLUMNS",
    "EMIT",
    "ROW_SCHEMA",
    "STATE",
    "STATE_SCHEMA",
    "ComponentRef",
]

#: Schema of every stage's output (Spark DDL).
ROW_SCHEMA: Final = (
    "component string, stream string, kind string, values binary, key binary, "
    "state binary"
)
#: Column names of :data:`ROW_SCHEMA`, in order.
COLUMNS: Final = ("component", "stream", "kind", "values", "key", "state")
#: Schema of a stateful bolt's GroupState: the key's fields, msgpack-encoded.
STATE_SCHEMA: Final = "state binary"
EMIT: Final = "emit"
STATE: Final = "state"


@dataclass(frozen=True)
class ComponentRef:
    """What a Spark task needs to rebuild a component: picklable plain data.

    User classes are never pickled: each Python worker imports the topology file
    itself, so the file must be readable at the same path on every worker.

    Attributes:
        topology_path: Absolute path of the topology file.
        component: Component id.
        conf: Storm conf overrides (``wordcount.lines`` and the like).
    """

    topology_path: str
    component: str
    conf: Mapping[str, Any] = field(default_factory=dict)

    def to_options(self) -> dict[str, str]:
        """Return this reference as data source options."""
        return {
            "topology": self.topology_path,
            "component": self.component,
            "conf": json.dumps(dict(self.conf)),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ComponentRef:
        """Rebuild a reference from :meth:`to_options` output."""
        return cls(
            topology_path=str(Path(options["topology"])),
            component=options["component"],
            conf=json.loads(options.get("conf") or "{}"),
        )
