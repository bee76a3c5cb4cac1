"""What ``sr3 rebalance`` may ask of a running topology, and the task moves it means.

Pure functions shared by the CLI (which refuses a bad request before it writes
anything) and the running run of either engine (which checks again,
authoritatively, before it moves anything). A request names stateful
components and their new task counts; the count may go from 1 up to the
component's key-group count (``sr3.state.key.groups``, its maximum
parallelism, as in Flink).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from topology_api.errors import TopologyApiError

__all__ = [
    "ComponentInfo",
    "KeyGroupMove",
    "RebalanceRequestError",
    "TaskMoves",
    "batch_moves",
    "check_request",
    "parse_targets",
    "plan_key_groups",
    "plan_moves",
]


class RebalanceRequestError(TopologyApiError, ValueError):
    """A rebalance request the running topology refuses; nothing was changed."""


@dataclass(frozen=True)
class ComponentInfo:
    """What a running run says about one of its components.

    Attributes:
        tasks: Its task count now.
        stateful: Whether it is a stateful bolt (only those rebalance).
        max_tasks: Its key-group count: the most tasks it may have.
        fixed: Why its task count must not change ("" if it may: see
            :func:`topology_api.contract.fixed_parallelism`).
    """

    tasks: int
    stateful: bool
    max_tasks: int
    fixed: str = ""

    def to_dict(self) -> dict[str, object]:
        """Return a msgpack- and JSON-friendly dict."""
        found: dict[str, object] = {
            "tasks": self.tasks,
            "stateful": self.stateful,
            "max": self.max_tasks,
        }
        if self.fixed:
            found["fixed"] = self.fixed
        return found

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> ComponentInfo:
        """Build from :meth:`to_dict` output (malformed values raise ValueError)."""
        return cls(
            tasks=int(str(raw["tasks"])),
            stateful=bool(raw["stateful"]),
            max_tasks=int(str(raw["max"])),
            fixed=str(raw.get("fixed") or ""),
        )


def parse_targets(pairs: Sequence[str]) -> dict[str, int]:
    """Return ``{component: tasks}`` from ``-e COMPONENT=N`` arguments.

    Raises:
        RebalanceRequestError: a pair is not ``NAME=N`` with an integer N, or a
            component is named twice.
    """
    targets: dict[str, int] = {}
    for pair in pairs:
        name, sep, count = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            msg = f"-e {pair!r}: write COMPONENT=N, e.g. -e count=4"
            raise RebalanceRequestError(msg)
        try:
            tasks = int(count)
        except ValueError as exc:
            msg = f"-e {pair!r}: {count!r} is not a task count; write e.g. -e {name}=4"
            raise RebalanceRequestError(msg) from exc
        if name in targets:
            msg = f"-e {pair!r}: component {name!r} is named twice; name it once"
            raise RebalanceRequestError(msg)
        targets[name] = tasks
    if not targets:
        msg = "nothing to rebalance: name at least one -e COMPONENT=N"
        raise RebalanceRequestError(msg)
    return targets


def check_request(
    topology: str,
    components: Mapping[str, ComponentInfo],
    targets: Mapping[str, int],
) -> None:
    """Refuse a request the running topology cannot carry out.

    Raises:
        RebalanceRequestError: an unknown or stateless component, one whose
            task count is fixed, or a task count outside ``1..max`` (the
            message names the fix).
    """
    for name, tasks in targets.items():
        info = components.get(name)
        if info is None:
            known = ", ".join(sorted(components)) or "none"
            msg = (
                f"topology {topology!r} has no component {name!r}; its components: "
                f"{known}"
            )
            raise RebalanceRequestError(msg)
        if not info.stateful:
            stateful = ", ".join(sorted(n for n, c in components.items() if c.stateful))
            msg = (
                f"component {name!r} of {topology!r} is stateless: only stateful "
                f"bolts rebalance live (key groups move); its stateful bolts: "
                f"{stateful or 'none'}. Change a stateless component's parallelism "
                "between runs"
            )
            raise RebalanceRequestError(msg)
        if info.fixed and tasks != info.tasks:
            msg = (
                f"component {name!r} of {topology!r} keeps its {info.tasks} task(s): "
                f"{info.fixed}; it cannot rebalance"
            )
            raise RebalanceRequestError(msg)
        if not 1 <= tasks <= info.max_tasks:
            msg = (
                f"component {name!r} of {topology!r} can have 1..{info.max_tasks} "
                f"tasks (its sr3.state.key.groups), not {tasks}; a larger maximum "
                "needs more key groups, set before the component's first deployment"
            )
            raise RebalanceRequestError(msg)


@dataclass(frozen=True)
class TaskMoves:
    """The task ids of one component before and after a rebalance.

    Task indexes keep their order: the tasks that stay are the lowest indexes,
    new tasks take new ids above every id in use (so their indexes follow),
    retired tasks are the highest indexes.

    Attributes:
        keep: Ids that stay (their keys change with the task count).
        retire: Ids whose processes stop.
        add: New ids whose processes start.
    """

    keep: tuple[int, ...]
    retire: tuple[int, ...]
    add: tuple[int, ...]

    @property
    def after(self) -> tuple[int, ...]:
        """The component's task ids after the rebalance, by index."""
        return (*self.keep, *self.add)


def plan_moves(current: Sequence[int], tasks: int, next_id: int) -> TaskMoves:
    """Return the task moves that take ``current`` (by index) to ``tasks`` tasks.

    Args:
        current: The component's task ids now, sorted (index order).
        tasks: The new task count (>= 1).
        next_id: The lowest id not in use by any task of the topology.

    Raises:
        ValueError: ``tasks < 1`` or ``next_id`` is in use.
    """
    if tasks < 1:
        msg = f"a component needs at least 1 task, not {tasks}"
        raise ValueError(msg)
    if current and next_id <= max(current):
        msg = f"task id {next_id} is in use"
        raise ValueError(msg)
    ids = sorted(current)
    keep = tuple(ids[:tasks])
    retire = tuple(ids[tasks:])
    add = tuple(range(next_id, next_id + max(0, tasks - len(ids))))
    return TaskMoves(keep, retire, add)


@dataclass(frozen=True)
class KeyGroupMove:
    """One key group changing owner in a key-groups rebalance.

    Attributes:
        key_group: The key group.
        sender: Task index owning it now.
        receiver: Task index owning it after the move.
    """

    key_group: int
    sender: int
    receiver: int


def plan_key_groups(table: Sequence[int], tasks: int) -> list[KeyGroupMove]:
    """Return the fewest key-group moves that balance ``table`` over ``tasks`` tasks.

    ``table[kg]`` is the task index owning key group ``kg``. After the moves
    each of the ``tasks`` tasks owns ``G // tasks`` or one more key groups
    (indexes ``tasks`` and above own none: they retire). Each task keeps up to
    its quota of what it owns (its lowest key groups); the extra key groups go
    to the tasks that own the most, so the fewest change owner; the surplus
    goes, lowest key group first, to the tasks under their quota, lowest index
    first. New tasks are the indexes above the current ones.

    Raises:
        ValueError: ``tasks`` is not in ``1..len(table)``.
    """
    count = len(table)
    if not 1 <= tasks <= count:
        msg = f"{tasks} tasks cannot share {count} key groups"
        raise ValueError(msg)
    owned: dict[int, list[int]] = {i: [] for i in range(tasks)}
    surplus: list[int] = []
    for kg, index in enumerate(table):
        if index < tasks:
            owned[index].append(kg)
        else:
            surplus.append(kg)
    base, extra = divmod(count, tasks)
    biggest = sorted(owned, key=lambda i: (-len(owned[i]), i))
    quota = {i: base + (1 if rank < extra else 0) for rank, i in enumerate(biggest)}
    for index, kgs in owned.items():
        surplus.extend(kgs[quota[index] :])
        del kgs[quota[index] :]
    surplus.sort()
    moves: list[KeyGroupMove] = []
    receivers = iter(i for i in range(tasks) for _ in range(quota[i] - len(owned[i])))
    for kg, receiver in zip(surplus, receivers, strict=True):
        moves.append(KeyGroupMove(kg, table[kg], receiver))
    return moves


def batch_moves(moves: Sequence[KeyGroupMove], size: int) -> list[list[KeyGroupMove]]:
    """Split ``moves`` into batches of at most ``size``, moved one at a time.

    The moves of each (sender, receiver) pair are dealt round robin over the
    pairs, so a batch spreads over as many senders and receivers as it can: each
    task installs or drops few key groups per batch, which keeps the pause of
    every moving key group short (Megaphone's fine-grained migration).

    Raises:
        ValueError: ``size < 1``.
    """
    if size < 1:
        msg = f"a batch holds at least 1 key group, not {size}"
        raise ValueError(msg)
    pairs: dict[tuple[int, int], list[KeyGroupMove]] = {}
    for move in moves:
        pairs.setdefault((move.sender, move.receiver), []).append(move)
    dealt = [
        move
        for layer in zip_longest(*pairs.values())
        for move in layer
        if move is not None
    ]
    return [dealt[i : i + size] for i in range(0, len(dealt), size)]
