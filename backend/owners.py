"""Owner ids: whose state a snapshot holds, ``<topology>/<component>/<task index>``.

One stateful task is one owner. The ring's manifests, the commit records and
both engines name owners this way; this module is the only place the name is
built or taken apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "OwnerId",
    "component_owners",
    "owner_name",
    "owner_topology",
    "task_label",
    "topology_owners",
    "writer_name",
]


@dataclass(frozen=True, order=True)
class OwnerId:
    """One stateful task's state.

    Attributes:
        topology: The topology name.
        component: The stateful bolt.
        index: The task's index among the bolt's tasks (0-based).
    """

    topology: str
    component: str
    index: int

    def __str__(self) -> str:
        return f"{self.topology}/{self.component}/{self.index}"

    @classmethod
    def parse(cls, name: str) -> OwnerId:
        """Return the owner ``name`` names.

        Raises:
            ValueError: ``name`` is not ``<topology>/<component>/<index>``.
        """
        parts = name.rsplit("/", 2)
        if len(parts) != 3 or not all(parts) or not parts[2].isdigit():  # noqa: PLR2004
            msg = f"owner {name!r} is not <topology>/<component>/<task index>"
            raise ValueError(msg)
        return cls(parts[0], parts[1], int(parts[2]))


def owner_name(topology: str, component: str, index: int) -> str:
    """Return the owner id of task ``index`` of ``component``."""
    return str(OwnerId(topology, component, index))


def writer_name(topology: str, component: str, writer: str) -> str:
    """Return the name of another writer of a component's epochs (not a task).

    The Spark driver's pending Kafka outputs of a sink are
    ``<topology>/<component>/spark``: the name ends in ``writer``, not an index.
    """
    return f"{topology}/{component}/{writer}"


def owner_topology(name: str) -> str | None:
    """Return the topology of ``<topology>/<component>/<part>`` (None: not such a name).

    Task owners end in their index; another writer of a topology's epochs ends
    in a name (the Spark driver's pending Kafka outputs, ``.../spark``).
    """
    parts = name.rsplit("/", 2)
    if len(parts) != 3 or not all(parts):  # noqa: PLR2004 (three parts)
        return None
    return parts[0]


def task_label(owner: str) -> str:
    """``component:index`` of an owner ``<topology>/<component>/<index>``."""
    parts = owner.split("/")
    return ":".join(parts[-2:]) if len(parts) >= 2 else owner  # noqa: PLR2004 (two parts)


def _parsed(names: Iterable[str]) -> list[OwnerId]:
    found: list[OwnerId] = []
    for name in names:
        try:
            found.append(OwnerId.parse(name))
        except ValueError:
            continue  # not an owner (an offset key, another writer's name)
    return found


def topology_owners(names: Iterable[str], topology: str) -> list[str]:
    """Return the owners of ``topology`` among ``names``, in component/index order."""
    return [str(o) for o in sorted(_parsed(names)) if o.topology == topology]


def component_owners(names: Iterable[str], topology: str, component: str) -> list[str]:
    """Return the owners of ``component`` among ``names``, by task index."""
    return [
        str(o)
        for o in sorted(_parsed(names))
        if o.topology == topology and o.component == component
    ]
