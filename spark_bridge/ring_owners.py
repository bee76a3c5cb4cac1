"""The stateful owners of a Spark run: one per task of each stateful bolt.

Owners are ``<topology>/<component>/<task index>``, as on the Storm engine, so
either engine continues from the other's committed epoch. A key belongs to the
task Storm's fields grouping sends it to; for a bolt overriding ``state_key``,
by the route stored with the key's fields (:func:`stored_route`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backend.owners import owner_name
from sr3.codec import decode_value
from sr3.config import Sr3Config
from sr3.key_state import ROUTE_FIELD
from topology_api.topology import LoadedTopology

__all__ = ["Owner", "stateful_owners", "stored_route"]


@dataclass(frozen=True)
class Owner:
    """One task of a stateful bolt, as the ring knows it.

    Attributes:
        name: ``<topology>/<component>/<index>``.
        component: The stateful bolt.
        index: Task index among the bolt's tasks.
        tasks: The bolt's task count.
        key_groups: G of the owner (``sr3.state.key.groups``).
        mechanism: ``sr3.recovery.mechanism`` of the bolt.
    """

    name: str
    component: str
    index: int
    tasks: int
    key_groups: int
    mechanism: str


def stored_route(blob: bytes) -> int | None:
    """Return the route stored in a key's state blob (None: the key routes itself)."""
    fields = decode_value(blob)
    route = fields.get(ROUTE_FIELD) if isinstance(fields, dict) else None
    return route if isinstance(route, int) else None


def stateful_owners(
    topology: LoadedTopology, stateful: Sequence[str], conf: Mapping[str, Any]
) -> list[Owner]:
    """Return the owners of every task of the ``stateful`` bolts.

    Raises:
        ConfigError: a component's ``sr3.*`` setting is invalid (the message
            names the key and the accepted values).
    """
    owners: list[Owner] = []
    for component in stateful:
        info = topology.components[component]
        settings = Sr3Config.merged(topology.config, conf, info.config or {})
        owners.extend(
            Owner(
                owner_name(topology.name, component, index),
                component,
                index,
                info.tasks,
                settings.ring.key_group_count,
                settings.recovery.mechanism,
            )
            for index in range(info.tasks)
        )
    return owners
