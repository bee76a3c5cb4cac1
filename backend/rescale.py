"""Rescaling: the tasks of a component now take the keys its old tasks committed.

A component committed with one task count and deployed with another must put
each key on the task its tuples go to now. Storm's fields grouping routes a
tuple by the hash of its grouping values modulo the task count, not by key
group ranges, so every old owner is read and each key placed by ``route(key,
stored_route)`` (the engine's grouping; ``stored_route`` is the key's route
when it differs from the key, :data:`sr3.key_state.ROUTE_FIELD`). Storm's tasks
each keep their own keys (:meth:`backend.restorer.StateRestorer.restore_task`);
the Spark engine rewrites every task at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from backend.owners import OwnerId
from zk.checkpoints import CommitRecord

if TYPE_CHECKING:
    from backend.restorer import RestoreReport
    from sr3.state import KeyedState

__all__ = ["Placed", "Resharded", "Route", "candidate_owners", "reshard"]

#: ``route(key, stored_route)``: the task index, among the component's tasks
#: now, that a key belongs to (the engine's fields grouping: a hash of the key,
#: or of its stored route, modulo the task count).
Route = Callable[[tuple[Any, ...], int | None], int]


def candidate_owners(owners: Sequence[str], index: int, tasks: int) -> list[str]:
    """Return the committed ``owners`` that can hold keys of task ``index``.

    A key lives on the task its route hash ``h`` modulo the task count names. A
    key of old task ``i`` (``i = h mod n``, ``n = len(owners)``) goes to new
    task ``j = h mod tasks`` only if ``i`` and ``j`` are congruent modulo
    ``gcd(n, tasks)``: a new task reads ``n / gcd`` old owners, not all ``n``
    (2 -> 4 tasks: one of two; 4 -> 2: two of four; 3 -> 4: all three).

    Raises:
        ValueError: an owner name has no task index.
    """
    step = math.gcd(len(owners), tasks)
    return [o for o in owners if OwnerId.parse(o).index % step == index % step]


class Restores(Protocol):
    """What :func:`reshard` reads committed owners through."""

    def restore(
        self,
        owner: str,
        record: CommitRecord | None,
        *,
        key_group_count: int,
        mechanism: str,
    ) -> tuple[KeyedState, RestoreReport]:
        """Rebuild ``owner``'s keyed state of the committed epoch."""
        ...


@dataclass(frozen=True)
class Placed:
    """One committed key and the task it goes to now.

    Attributes:
        index: The task index among the component's tasks now.
        key: The state key.
        route: The key's stored route (None: the key routes itself).
        fields: The key's fields.
    """

    index: int
    key: tuple[Any, ...]
    route: int | None
    fields: dict[str, Any]


@dataclass
class Resharded:
    """What reading a rescaled component's committed owners found.

    Attributes:
        keys: The keys kept, each with its new task.
        shards: Shards fetched.
        bytes_read: Payload bytes fetched.
        used: Transfer structures the restores used.
    """

    keys: list[Placed] = field(default_factory=list)
    shards: int = 0
    bytes_read: int = 0
    used: set[str] = field(default_factory=set)


def reshard(  # noqa: PLR0913 (what identifies the committed owners and the new tasks)
    access: Restores,
    record: CommitRecord,
    before: Sequence[str],
    *,
    key_group_count: int,
    mechanism: str,
    route: Route,
    index: int | None = None,
) -> Resharded:
    """Read the committed owners ``before`` and place their keys on the new tasks.

    Args:
        access: What restores an owner (a ring access or its restorer).
        record: The committed epoch the owners are read at.
        before: The component's owners in ``record``.
        key_group_count: G of the component.
        mechanism: Restore mechanism of each owner.
        route: Where a key belongs now.
        index: Keep only the keys of this task (None: every key).

    Raises:
        RecoveryError, ShardNotFoundError: a snapshot cannot be read.
        CoordinationError: ZooKeeper failed.
    """
    found = Resharded()
    for old in before:
        part, report = access.restore(
            old, record, key_group_count=key_group_count, mechanism=mechanism
        )
        found.shards += report.shards
        found.bytes_read += report.bytes_read
        found.used.add(report.used)
        for key, stored, fields in part.routed_items():
            task = route(key, stored)
            if index is None or task == index:
                found.keys.append(Placed(task, key, stored, fields))
    return found
