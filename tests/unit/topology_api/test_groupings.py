"""Storm groupings: golden Java hash vectors and the groupers' behaviour.

The golden values were computed once with OpenJDK 17 (``javac FieldsVectors.java &&
java FieldsVectors``) from this program, which does what Storm's ``FieldsGrouper``
does (``TupleUtils.chooseTaskIndex``)::

    import java.math.BigInteger;
    import java.util.*;

    public class FieldsVectors {
        static void show(String label, List<Object> keys) {
            int h = Arrays.deepHashCode(keys.toArray());
            System.out.println(label + " hash=" + h + " mod3=" + Math.floorMod(h, 3)
                + " mod4=" + Math.floorMod(h, 4) + " mod7=" + Math.floorMod(h, 7));
        }
        public static void main(String[] a) {
            show("str_dog", Arrays.asList((Object) "dog"));
            show("str_empty", Arrays.asList((Object) ""));
            show("str_nonascii", Arrays.asList((Object) "caf\\u00e9 \\u00fcber"));
            show("str_astral", Arrays.asList((Object) "a\\uD83D\\uDE00b"));
            show("long_0", Arrays.asList((Object) 0L));
            show("long_42", Arrays.asList((Object) 42L));
            show("long_neg1", Arrays.asList((Object) (-1L)));
            show("long_neg12345", Arrays.asList((Object) (-12345L)));
            show("long_big", Arrays.asList((Object) 1234567890123L));
            show("long_min", Arrays.asList((Object) Long.MIN_VALUE));
            show("int_neg1", Arrays.asList((Object) (-1)));
            show("int_neg12345", Arrays.asList((Object) (-12345)));
            show("int_42", Arrays.asList((Object) 42));
            show("bigint_2p64", Arrays.asList(
                (Object) new BigInteger("18446744073709551616")));
            show("bigint_neg", Arrays.asList(
                (Object) new BigInteger("-98765432109876543210")));
            show("double_1_5", Arrays.asList((Object) 1.5d));
            show("double_neg0_1", Arrays.asList((Object) (-0.1d)));
            show("double_0", Arrays.asList((Object) 0.0d));
            show("double_neg0", Arrays.asList((Object) (-0.0d)));
            show("double_nan", Arrays.asList((Object) Double.NaN));
            show("true", Arrays.asList((Object) Boolean.TRUE));
            show("false", Arrays.asList((Object) Boolean.FALSE));
            show("null", Arrays.asList((Object) null));
            show("multi", Arrays.asList((Object) "user-7", 3L, Boolean.TRUE));
            show("nested", Arrays.asList((Object) Arrays.asList("a", 1L,
                Arrays.asList(2.5d, null)), "z"));
            Map<String, Object> m = new HashMap<>();
            m.put("k", 1L); m.put("word", "x");
            show("map", Arrays.asList((Object) m));
            show("empty", new ArrayList<Object>());
        }
    }

Java integers are ``Long`` for Storm < 2.6 (json-simple) and ``Integer`` when they
fit 32 bits for Storm >= 2.6 (json-smart); the ``int_*`` lines are the latter.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology_api.groupings import (
    AllGrouper,
    DirectGrouper,
    FieldsGrouper,
    GlobalGrouper,
    GroupingKind,
    GroupingSpec,
    NoneGrouper,
    ShuffleGrouper,
    make_grouper,
)
from topology_api.java_hash import IntegerBoxing, fields_task_index, java_hash

LONG = IntegerBoxing.LONG
INTEGER = IntegerBoxing.INTEGER

# (values, boxing, Arrays.deepHashCode, floorMod 3, floorMod 4, floorMod 7)
GOLDEN = [
    (["dog"], LONG, 99675, 0, 3, 2),
    ([""], LONG, 31, 1, 3, 3),
    (["café über"], LONG, 1448389841, 2, 1, 3),
    (["a😀b"], LONG, 57849725, 2, 1, 3),
    ([0], LONG, 31, 1, 3, 3),
    ([42], LONG, 73, 1, 1, 3),
    ([-1], LONG, 31, 1, 3, 3),
    ([-12345], LONG, 12375, 0, 3, 6),
    ([1234567890123], LONG, 1912276467, 0, 3, 3),
    ([-(2**63)], LONG, -2147483617, 2, 3, 1),
    ([-1], INTEGER, 30, 0, 2, 2),
    ([-12345], INTEGER, -12314, 1, 2, 6),
    ([42], INTEGER, 73, 1, 1, 3),
    ([1234567890123], INTEGER, 1912276467, 0, 3, 3),
    ([2**64], LONG, 992, 2, 0, 5),
    ([-98765432109876543210], LONG, 550835368, 1, 0, 6),
    ([1.5], LONG, 1073217567, 0, 3, 2),
    ([-0.1], LONG, 639631394, 2, 2, 3),
    ([0.0], LONG, 31, 1, 3, 3),
    ([-0.0], LONG, -2147483617, 2, 3, 1),
    ([float("nan")], LONG, 2146959391, 1, 3, 3),
    ([True], LONG, 1262, 2, 2, 2),
    ([False], LONG, 1268, 2, 0, 1),
    ([None], LONG, 31, 1, 3, 3),
    (["user-7", 3, True], LONG, -267662592, 0, 0, 6),
    ([["a", 1, [2.5, None]], "z"], LONG, 1329507291, 0, 3, 0),
    ([{"k": 1, "word": "x"}], LONG, 3655675, 1, 3, 2),
    ([], LONG, 1, 1, 1, 1),
]


@pytest.mark.parametrize(("values", "boxing", "hash_", "mod3", "mod4", "mod7"), GOLDEN)
def test_golden_java_vectors(
    values: list[object],
    boxing: IntegerBoxing,
    hash_: int,
    mod3: int,
    mod4: int,
    mod7: int,
) -> None:
    assert java_hash(values, boxing) == hash_
    assert [fields_task_index(values, n, boxing) for n in (3, 4, 7)] == [
        mod3,
        mod4,
        mod7,
    ]


# Where Storm 2.8.3 itself sends a tuple whose only field is grouped on, among 5
# tasks and among 7: (value as the router decodes it, task index of 5 and of 7
# under `integer` boxing, the same under `long` boxing). Produced once, not by
# hand: each value was emitted as pystorm emits it (``simplejson.dumps`` of
# ``{"command": "emit", "tuple": [value]}`` then ``end``), and this program, run
# with OpenJDK 17 on the jars of .cache/storm-2.8.3/lib-worker, read the emits
# with Storm's own multilang ``JsonSerializer`` (json-smart) and routed them with
# Storm's own ``GrouperFactory.FieldsGrouper`` (``TupleUtils.chooseTaskIndex``:
# ``Math.floorMod(Arrays.deepHashCode(values), numTasks)``). The `long` columns
# route the same tuple with json-simple's types (Storm < 2.6): every integer a
# ``Long``, every decimal a ``Double``::
#
#     static Object widen(Object v) {
#         if (v instanceof Integer) return Long.valueOf((Integer) v);
#         if (v instanceof BigDecimal) return ((BigDecimal) v).doubleValue();
#         if (v instanceof List) { /* widen each item */ }
#         return v;
#     }
#     static int route(List<Object> tuple, List<Integer> tasks) {
#         GrouperFactory.FieldsGrouper g = new GrouperFactory.FieldsGrouper(
#             new Fields("value"), Grouping.fields(Arrays.asList("value")));
#         g.prepare(null, null, tasks);
#         return g.chooseTasks(0, tuple).get(0);
#     }
#     public static void main(String[] args) throws Exception {
#         JsonSerializer s = new JsonSerializer();
#         s.initialize(OutputStream.nullOutputStream(), System.in);
#         List<Integer> five = Arrays.asList(10, 11, 12, 13, 14);
#         List<Integer> seven = Arrays.asList(20, 21, 22, 23, 24, 25, 26);
#         for (int i = 0; i < Integer.parseInt(args[0]); i++) {
#             List<Object> t = s.readShellMsg().getTuple();
#             List<Object> w = new ArrayList<>();
#             for (Object o : t) w.add(widen(o));
#             System.out.println((route(t, five) - 10) + " " + (route(t, seven) - 20)
#                 + " " + (route(w, five) - 10) + " " + (route(w, seven) - 20));
#         }
#     }
#
# The comment after each row is the Java class json-smart gave the value.
STORM_2_8_3_ROUTES = [
    (0, 1, 3, 1, 3),  # Integer
    (1, 2, 4, 2, 4),  # Integer
    (42, 3, 3, 3, 3),  # Integer
    (-1, 0, 2, 1, 3),  # Integer
    (-12345, 1, 6, 0, 6),  # Integer
    (2**31 - 1, 2, 0, 2, 0),  # Integer
    (2**31, 3, 1, 3, 1),  # Long
    (-(2**31), 3, 1, 2, 0),  # Integer
    (-(2**31) - 1, 3, 1, 3, 1),  # Long
    (2**40 + 7, 4, 0, 4, 0),  # Long
    (-(2**53), 4, 2, 4, 2),  # Long
    (2**63 - 1, 3, 1, 3, 1),  # Long
    (-(2**63), 3, 1, 3, 1),  # Long
    (2**64, 2, 5, 2, 5),  # BigInteger
    (-98765432109876543210, 3, 6, 3, 6),  # BigInteger
    (1.5, 2, 2, 2, 2),  # Double
    (-0.1, 4, 3, 4, 3),  # Double
    (0.0, 1, 3, 1, 3),  # Double
    (-0.0, 3, 1, 3, 1),  # Double
    (3.0, 3, 6, 3, 6),  # Double
    (1e100, 3, 0, 3, 0),  # Double
    (1e-07, 3, 0, 3, 0),  # Double
    (123456.789, 1, 0, 1, 0),  # Double
    (True, 2, 2, 2, 2),  # Boolean
    (False, 3, 1, 3, 1),  # Boolean
    (None, 1, 3, 1, 3),  # null
    ("", 1, 3, 1, 3),  # String
    ("dog", 0, 2, 0, 2),  # String
    ("café über", 1, 3, 1, 3),  # String
    ("a😀b", 0, 3, 0, 3),  # String
    ("日本語", 4, 1, 4, 1),  # String
    ("-1", 0, 5, 0, 5),  # String
    ([], 2, 4, 2, 4),  # List
    ([1, "a"], 0, 0, 0, 0),  # [Integer, String]
    (["a", 1, [2.5, None]], 1, 0, 1, 0),  # [String, Integer, [Double, null]]
    ([2**40, -1, True], 3, 6, 4, 2),  # [Long, Integer, Boolean]
    ([[-(2**31) - 1], "x"], 0, 6, 0, 6),  # [[Long], String]
]

# json-smart reads a decimal whose JSON text is longer than 18 characters as a
# BigDecimal, not a Double (``JSONParserBase.extractFloat``), and BigDecimal
# hashes differently (``31 * unscaledValue.hashCode() + scale``).
BIG_DECIMAL_ROUTES = [
    (0.1 + 0.2, 1, 5, 4, 1),  # BigDecimal "0.30000000000000004"
    (-1 / 3, 4, 2, 2, 6),  # BigDecimal "-0.3333333333333333"
]


def _storm_routes() -> list[object]:
    params: list[object] = []
    for value, int5, int7, long5, long7 in STORM_2_8_3_ROUTES + BIG_DECIMAL_ROUTES:
        params.append(pytest.param(value, LONG, long5, long7, id=f"long-{value!r}"))
        params.append(pytest.param(value, INTEGER, int5, int7, id=f"integer-{value!r}"))
    return params


@pytest.mark.parametrize(("value", "boxing", "index5", "index7"), _storm_routes())
def test_fields_grouper_sends_each_value_where_storm_2_8_3_does(
    value: object, boxing: IntegerBoxing, index5: int, index7: int
) -> None:
    routed = json.loads(json.dumps([value]))  # as the router decodes an emit
    for tasks, index in (([14, 12, 10, 13, 11], index5), (range(20, 27), index7)):
        grouper = FieldsGrouper(
            list(tasks), output_fields=["value"], group_fields=["value"], boxing=boxing
        )
        assert grouper.choose_tasks(routed) == [sorted(tasks)[index]]


def test_words_over_five_tasks() -> None:
    # java: Math.floorMod(Arrays.deepHashCode(new Object[]{w}), 5) for each word
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"]
    assert [fields_task_index([w], 5) for w in words] == [2, 2, 3, 4, 0, 0, 4, 0]


def test_unhashable_value() -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        java_hash(b"bytes")
    with pytest.raises(ValueError, match="positive"):
        fields_task_index(["a"], 0)


@given(st.lists(st.one_of(st.integers(), st.text(), st.floats(), st.booleans())))
def test_hash_is_a_java_int(values: list[object]) -> None:
    assert -(2**31) <= java_hash(values) < 2**31
    assert 0 <= fields_task_index(values, 7) < 7


class TestFieldsGrouper:
    def test_selects_group_fields_in_order_over_sorted_tasks(self) -> None:
        grouper = FieldsGrouper(
            [12, 4, 9],
            output_fields=["count", "word", "user"],
            group_fields=["user", "word"],
        )
        assert grouper.target_tasks == (4, 9, 12)
        index = fields_task_index(["u7", "dog"], 3)
        assert grouper.choose_tasks([5, "dog", "u7"]) == [(4, 9, 12)[index]]

    def test_missing_value(self) -> None:
        grouper = FieldsGrouper([1, 2], output_fields=["a", "b"], group_fields=["b"])
        with pytest.raises(ValueError, match="no value for grouping fields"):
            grouper.choose_tasks(["only-a"])

    def test_unknown_field(self) -> None:
        with pytest.raises(ValueError, match="not among the stream's fields"):
            FieldsGrouper([1], output_fields=["a"], group_fields=["z"])


def test_shuffle_is_storms_round_robin() -> None:
    rng = random.Random(3)
    grouper = ShuffleGrouper([5, 3, 8, 1], rng)
    permutation = [1, 3, 5, 8]
    random.Random(3).shuffle(permutation)
    picks = [grouper.choose_tasks([])[0] for _ in range(9)]
    # ShuffleGrouping's counter starts at 0 and is incremented before use.
    expected = permutation[1:] + permutation + permutation[:2]
    assert picks == expected


def test_other_groupers() -> None:
    rng = random.Random(0)
    assert GlobalGrouper([7, 3, 5]).choose_tasks([]) == [3]
    assert AllGrouper([7, 3, 5]).choose_tasks([]) == [3, 5, 7]
    picks = {NoneGrouper([7, 3], rng).choose_tasks([])[0] for _ in range(50)}
    assert picks == {3, 7}
    with pytest.raises(ValueError, match="regular emit to direct stream"):
        DirectGrouper([1]).choose_tasks([])


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        (GroupingSpec(GroupingKind.FIELDS, ("w",)), FieldsGrouper),
        (GroupingSpec(GroupingKind.FIELDS), GlobalGrouper),
        (GroupingSpec(GroupingKind.SHUFFLE), ShuffleGrouper),
        (GroupingSpec(GroupingKind.LOCAL_OR_SHUFFLE), ShuffleGrouper),
        (GroupingSpec(GroupingKind.NONE), NoneGrouper),
        (GroupingSpec(GroupingKind.ALL), AllGrouper),
        (GroupingSpec(GroupingKind.DIRECT), DirectGrouper),
    ],
)
def test_make_grouper(spec: GroupingSpec, cls: type) -> None:
    grouper = make_grouper(spec, [2, 1], output_fields=["w"], rng=random.Random(0))
    assert type(grouper) is cls


def test_custom_groupings_cannot_run() -> None:
    spec = GroupingSpec(GroupingKind.CUSTOM_OBJECT)
    with pytest.raises(ValueError, match="Java classes"):
        make_grouper(spec, [1], output_fields=[], rng=random.Random(0))


def test_context_form() -> None:
    assert GroupingSpec(GroupingKind.FIELDS, ("w",)).to_context() == {
        "type": "FIELDS",
        "fields": ["w"],
    }
    assert GroupingSpec(GroupingKind.FIELDS).is_global
    assert GroupingSpec(GroupingKind.SHUFFLE).to_context() == {"type": "SHUFFLE"}
