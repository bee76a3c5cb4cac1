"""Partial-key grouping picks the tasks Storm 2.8.3's ``PartialKeyGrouping`` picks.

The vectors were printed by Storm's own class (``vectors/PartialKeyVectors.java``
run with ``java`` against the storm-client 2.8.3 jar): each row is one sender
emitting the first values in order, so the balanced selector's load counts are
part of what is compared.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from topology_api.groupings import (
    GroupingKind,
    GroupingSpec,
    PartialKeyGrouper,
    make_grouper,
)
from topology_api.java_hash import IntegerBoxing
from topology_api.java_serial import partial_key_fields, serialize_partial_key
from topology_api.partial_key import (
    PARTIAL_KEY_CLASS,
    first_value_key,
    java_random_ints,
    java_to_string,
    partial_key_grouping,
    two_task_assignment,
)
from topology_api.topology import load_topology

PARTIAL_KEY = GroupingSpec(GroupingKind.CUSTOM_OBJECT, java_class=PARTIAL_KEY_CLASS)


@pytest.mark.parametrize(
    ("seed", "bound", "draws"),
    [
        (0, 10, [0, 8, 9, 7, 5]),
        (42, 7, [1, 5, 6, 3, 5]),
        (-5, 3, [0, 2, 0, 0, 1]),
        (123456789, 16, [10, 12, 7, 4, 6]),  # a power of two: the other branch
        (-1, 10**9, [577549913, 943952225, 26349579, 176895439, 421815604]),
    ],
)
def test_java_random_draws_match_java(seed: int, bound: int, draws: list[int]) -> None:
    assert java_random_ints(seed, bound, 5) == draws


def _sender(tasks: list[int], firsts: list[Any]) -> list[int]:
    grouper = make_grouper(
        PARTIAL_KEY, tasks, output_fields=["k", "v"], rng=random.Random(0)
    )
    return [grouper.choose_tasks([first, "x"])[0] for first in firsts]


@pytest.mark.parametrize(
    ("tasks", "firsts", "chosen"),
    [
        (
            [3, 4, 5],
            [f"d{n}" for n in range(12)],
            [5, 3, 4, 4, 5, 3, 4, 3, 5, 5, 4, 5],
        ),
        ([1, 2], ["k0", "k0", "k0", "k1", "k1", "k2"], [1, 2, 1, 2, 1, 2]),
        (
            [10, 20, 30, 40, 50],
            ["k"] * 7 + ["ключ1", "ключ1", "キー2", "emoji😀3", "𝄞5"],
            [30, 10, 30, 10, 30, 10, 30, 40, 50, 40, 50, 50],
        ),
        ([7], ["a", "b", "c"], [7, 7, 7]),
        (
            [2, 3, 4],
            [-1, 0, 7, 99999999999, True, False, 0.5, 1e300, -2.5e-8, 12345678.0],
            [2, 4, 3, 2, 4, 3, 4, 2, 3, 3],
        ),
    ],
)
def test_a_sender_picks_the_tasks_storm_picks(
    tasks: list[int], firsts: list[Any], chosen: list[int]
) -> None:
    assert _sender(tasks, firsts) == chosen


def test_targets_are_sorted_as_storm_sorts_them() -> None:
    assert _sender([5, 3, 4], ["d0", "d1", "d2"]) == [5, 3, 4]


def test_a_hot_key_alternates_between_its_two_candidates() -> None:
    candidates = two_task_assignment(list(range(8)), first_value_key("hot"))
    assert len(set(candidates)) == 2
    chosen = _sender(list(range(8)), ["hot"] * 10)
    assert set(chosen) == set(candidates)
    assert chosen.count(candidates[0]) == chosen.count(candidates[1]) == 5


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("ключ", "ключ"),
        (2**70, "1180591620717411303424"),
        (True, "true"),
        (1e300, "1.0E300"),
        (-2.5e-8, "-2.5E-8"),
        (12345678.0, "1.2345678E7"),
        (100.0, "100.0"),
        (float("nan"), "NaN"),
    ],
)
def test_keys_are_the_first_values_java_to_string(value: Any, text: str) -> None:
    assert java_to_string(value) == text


@pytest.mark.parametrize(
    ("value", "named"), [(None, "NullPointerException"), ([1], "list"), ({}, "dict")]
)
def test_unsupported_first_values_are_named(value: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        _sender([1, 2], [value])


def test_other_java_groupings_are_still_refused() -> None:
    other = GroupingSpec(GroupingKind.CUSTOM_OBJECT, java_class="org.example.Mine")
    with pytest.raises(ValueError, match="PartialKeyGrouping"):
        make_grouper(other, [1, 2], output_fields=["k"], rng=random.Random(0))


VECTORS = Path(__file__).resolve().parent / "vectors"


@pytest.mark.parametrize(
    ("fields", "hex_file"),
    [
        (["word"], "partial_key_word.hex"),
        ("k0 key group ключ a b c d e f g h i j k l m".split(), "partial_key_many.hex"),
    ],
)
def test_serialized_grouping_is_byte_identical_to_storms(
    fields: list[str], hex_file: str
) -> None:
    expected = bytes.fromhex((VECTORS / hex_file).read_text().strip())
    assert serialize_partial_key(fields) == expected
    assert partial_key_fields(expected) == tuple(fields)


def test_other_serialized_objects_are_not_taken_for_it() -> None:
    data = serialize_partial_key(["word"])
    assert partial_key_fields(data[:-1]) is None
    assert partial_key_fields(data.replace(b"Fields", b"Fieldz")) is None
    assert partial_key_fields(b"\xac\xed\x00\x05junk") is None


def test_a_field_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate field names"):
        partial_key_grouping("word", "word")


def _fields_sender(
    tasks: list[int], fields: list[str], group: list[str], rows: list[list[Any]]
) -> list[int]:
    grouper = PartialKeyGrouper(
        tasks, output_fields=fields, group_fields=group, boxing=IntegerBoxing.INTEGER
    )
    return [grouper.choose_tasks(row)[0] for row in rows]


def test_a_sender_on_fields_picks_the_tasks_storm_picks() -> None:
    # Integer boxing: Storm >= 2.6's json-smart types (M: BigDecimal in Java)
    keys = ["k0", "k1", "k0", "k0", "k0", "k2", "ключ", "𝄞5", "k0", "k1"]
    rows = [[f"d{n}", key, "x"] for n, key in enumerate(keys)]
    assert _fields_sender([3, 4, 5], ["id", "key", "group"], ["key"], rows) == [
        4, 5, 4, 5, 4, 5, 3, 3, 4, 3,
    ]  # fmt: skip
    groups = [-1, -1, 2**32, 0.5, 0.12345678901234568, None, True, [1, "two", None]]
    rows = [[chr(97 + n), "k", g] for n, g in enumerate(groups)]
    rows += [["i", None, None], ["j", "k", 7]]
    assert _fields_sender([2, 5, 9, 11], ["id", "key", "group"], ["key", "group"],
                          rows) == [5, 9, 2, 2, 9, 11, 11, 5, 9, 2]  # fmt: skip
    rows = [["x", n] for n in (1, 1, 1, 2, 2, 3)]
    assert _fields_sender([1, 2, 3], ["a", "b"], ["b"], rows) == [3, 2, 3, 1, 1, 1]


def test_the_helper_runs_through_the_loader(write_topology: Any) -> None:
    body = """
from streamparse import Topology
from storm_bridge import partial_key_grouping
from {helpers} import CountBolt, WordSpout

class P(Topology):
    word_spout = WordSpout.spec()
    count_bolt = CountBolt.spec(inputs={{word_spout: partial_key_grouping("word")}})
"""
    topology = load_topology(write_topology(body))
    (sub,) = topology.components["count_bolt"].inputs
    assert sub.grouping.is_partial_key
    assert sub.grouping.fields == ("word",)
    assert sub.grouping.kind is GroupingKind.CUSTOM_SERIALIZED


def test_field_names_read_back_in_java_modified_utf8() -> None:
    # NUL as two bytes, a non-BMP character as two 3-byte surrogates
    names = ("a\x00b", "𝄞x", "ключ", "日本")
    assert partial_key_fields(serialize_partial_key(names)) == names
