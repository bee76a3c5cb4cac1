"""Key groups: hashing of keys and Flink-style contiguous ranges per task."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sr3.codec import encode_key
from sr3.errors import CodecError, ConfigError
from sr3.keygroups import (
    decode_table,
    encode_table,
    key_group,
    key_group_of_encoded,
    key_group_ranges,
    key_groups_for_task,
    range_table,
    task_for_key_group,
)


def test_key_group_is_stable_and_in_range() -> None:
    assert key_group(("the",), 256) == 44  # pinned in test_ring too
    assert key_group(("the",), 256) == key_group_of_encoded(encode_key(("the",)), 256)
    assert all(0 <= key_group(("w", i), 7) < 7 for i in range(500))


def test_key_groups_spread_evenly() -> None:
    counts = Counter(key_group(("word", i), 64) for i in range(64_000))
    assert len(counts) == 64
    assert max(counts.values()) < 1.15 * 1000 and min(counts.values()) > 0.85 * 1000


def test_equal_python_values_of_other_types_are_other_keys() -> None:
    assert encode_key((1,)) != encode_key((1.0,)) != encode_key((True,))


@given(st.integers(1, 600), st.data())
def test_task_ranges_partition_key_groups(count: int, data: st.DataObject) -> None:
    tasks = data.draw(st.integers(1, count))
    ranges = [key_groups_for_task(t, tasks, count) for t in range(tasks)]
    assert [kg for r in ranges for kg in r] == list(range(count))
    lengths = {len(r) for r in ranges}
    assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1
    for t, r in enumerate(ranges):
        for kg in (r[0], r[-1]):
            assert task_for_key_group(kg, tasks, count) == t
            assert kg * tasks // count == t


def test_flink_example() -> None:
    # Flink, maxParallelism 128 and parallelism 3: 0..42, 43..85, 86..127.
    assert key_groups_for_task(0, 3, 128) == range(0, 43)
    assert key_groups_for_task(1, 3, 128) == range(43, 86)
    assert key_groups_for_task(2, 3, 128) == range(86, 128)


def test_errors_say_what_to_change() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.state\.key\.groups"):
        key_group(("a",), 0)
    with pytest.raises(ConfigError, match="at most as many tasks"):
        key_groups_for_task(0, 9, 8)
    with pytest.raises(ConfigError, match="task index 3"):
        key_groups_for_task(3, 3, 8)
    with pytest.raises(ConfigError, match="key group 8"):
        task_for_key_group(8, 2, 8)
    with pytest.raises(CodecError):
        key_group((object(),), 8)


def test_a_range_table_is_the_ranges_of_key_groups_for_task() -> None:
    table = range_table(3, 10)
    for index in range(3):
        assert [kg for kg, i in enumerate(table) if i == index] == list(
            key_groups_for_task(index, 3, 10)
        )


def test_tables_encode_as_runs_and_back() -> None:
    table = [0, 0, 1, 1, 1, 0, 2]
    runs = encode_table(table)
    assert runs == [[0, 2], [1, 3], [0, 1], [2, 1]]
    assert decode_table(runs, 7) == table
    assert encode_table(range_table(4, 256)) == [[i, 64] for i in range(4)]
    assert key_group_ranges(table, 0) == "0-1,5"
    assert key_group_ranges(table, 3) == ""


def test_a_table_of_another_g_or_malformed_is_refused() -> None:
    with pytest.raises(ConfigError, match="covers 7 key groups, not 8"):
        decode_table([[0, 7]], 8)
    with pytest.raises(ConfigError, match="malformed key-group table"):
        decode_table([[0]], None)
