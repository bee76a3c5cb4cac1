"""Key groups: the fixed hash buckets of keyed state, and their ranges per task.

A key's key group is ``murmur3(encode_key(key), KEY_GROUP_SEED) mod G``. G is fixed
per component on its first deployment, so state stays addressable when the number
of tasks changes: task ``t`` of ``n`` owns the contiguous range of key groups ``kg``
with ``kg * n // G == t``, as Flink's ``KeyGroupRangeAssignment`` does.
"""

from __future__ import annotations

from typing import Any

from sr3.codec import encode_key
from sr3.errors import ConfigError
from sr3.ring import key_group_hash

__all__ = [
    "decode_table",
    "encode_table",
    "key_group",
    "key_group_of_encoded",
    "key_group_ranges",
    "key_groups_for_task",
    "range_table",
    "task_for_key_group",
]


def _check_count(key_group_count: int) -> None:
    if key_group_count < 1:
        msg = (
            f"key group count {key_group_count} is invalid; "
            "set sr3.state.key.groups to 1..32768"
        )
        raise ConfigError(msg)


def key_group_of_encoded(encoded_key: bytes, key_group_count: int) -> int:
    """Return the key group of a key already encoded with ``codec.encode_key``."""
    return key_group_hash(encoded_key) % key_group_count


def key_group(key: tuple[Any, ...], key_group_count: int) -> int:
    """Return the key group of ``key`` among ``key_group_count`` groups.

    Raises:
        ConfigError: ``key_group_count < 1``.
        CodecError: the key holds a value msgpack cannot encode.
    """
    _check_count(key_group_count)
    return key_group_hash(encode_key(key)) % key_group_count


def _check_tasks(task_index: int, num_tasks: int, key_group_count: int) -> None:
    _check_count(key_group_count)
    if not 1 <= num_tasks <= key_group_count:
        msg = (
            f"{num_tasks} tasks cannot share {key_group_count} key groups; use at "
            "most as many tasks as key groups, or raise sr3.state.key.groups before "
            "the component's first deployment"
        )
        raise ConfigError(msg)
    if not 0 <= task_index < num_tasks:
        msg = f"task index {task_index} is outside 0..{num_tasks - 1}"
        raise ConfigError(msg)


def key_groups_for_task(task_index: int, num_tasks: int, key_group_count: int) -> range:
    """Return the contiguous key groups owned by task ``task_index`` of ``num_tasks``.

    The ranges of all tasks partition ``range(key_group_count)`` and differ in length
    by at most one.

    Raises:
        ConfigError: ``num_tasks`` is not in ``1..key_group_count`` or the task index
            is out of range.
    """
    _check_tasks(task_index, num_tasks, key_group_count)
    start = (task_index * key_group_count + num_tasks - 1) // num_tasks
    stop = ((task_index + 1) * key_group_count + num_tasks - 1) // num_tasks
    return range(start, stop)


def task_for_key_group(kg: int, num_tasks: int, key_group_count: int) -> int:
    """Return the index of the task owning key group ``kg``.

    Raises:
        ConfigError: ``num_tasks`` is not in ``1..key_group_count`` or ``kg`` is out
            of range.
    """
    _check_tasks(0, num_tasks, key_group_count)
    if not 0 <= kg < key_group_count:
        msg = f"key group {kg} is outside 0..{key_group_count - 1}"
        raise ConfigError(msg)
    return kg * num_tasks // key_group_count


def range_table(num_tasks: int, key_group_count: int) -> list[int]:
    """Return the key group -> task index table of the contiguous ranges.

    ``table[kg]`` is :func:`task_for_key_group` of every key group: the table a
    key-group-routed component starts with (``sr3.rebalance.routing``).

    Raises:
        ConfigError: ``num_tasks`` is not in ``1..key_group_count``.
    """
    _check_tasks(0, num_tasks, key_group_count)
    return [kg * num_tasks // key_group_count for kg in range(key_group_count)]


def key_group_ranges(table: list[int], index: int) -> str:
    """Return the key groups ``table`` gives task ``index`` as ranges: ``0-63,128``."""
    ranges: list[str] = []
    start = None
    for kg, owner in enumerate([*table, -1]):
        if owner == index and start is None:
            start = kg
        elif owner != index and start is not None:
            ranges.append(str(start) if kg - 1 == start else f"{start}-{kg - 1}")
            start = None
    return ",".join(ranges)


def encode_table(table: list[int]) -> list[list[int]]:
    """Return ``table`` run-length encoded: ``[[task index, run length], ...]``.

    A table of contiguous ranges is one pair per task, whatever G is.
    """
    runs: list[list[int]] = []
    for index in table:
        if runs and runs[-1][0] == index:
            runs[-1][1] += 1
        else:
            runs.append([index, 1])
    return runs


def decode_table(runs: Any, key_group_count: int | None = None) -> list[int]:
    """Return the table :func:`encode_table` encoded.

    Raises:
        ConfigError: ``runs`` is malformed, or does not cover ``key_group_count``
            key groups when that is given.
    """
    table: list[int] = []
    try:
        for index, length in runs:
            if int(index) < 0 or int(length) < 1:
                msg = f"bad run {[index, length]!r}"
                raise ValueError(msg)
            table.extend([int(index)] * int(length))
    except (TypeError, ValueError) as exc:
        msg = f"malformed key-group table {runs!r}: {exc}"
        raise ConfigError(msg) from exc
    if key_group_count is not None and len(table) != key_group_count:
        msg = (
            f"key-group table covers {len(table)} key groups, not "
            f"{key_group_count}; was sr3.state.key.groups changed?"
        )
        raise ConfigError(msg)
    return table
