"""Keying and the stateful stage of a bolt whose state key is not its grouping.

No Spark session: the stages run in-process on rows built by hand, as a Spark
task runs them. The topology is the e2e rescaling one: ``per_user`` keyed by
``fields("user")``, ``per_page`` by ``(user, page)`` behind the same grouping.
"""

from __future__ import annotations

import textwrap
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spark_bridge.errors import ComponentError
from spark_bridge.keyed import StatefulStage
from spark_bridge.ring import stored_route
from spark_bridge.rows import DEAD, EMIT, RESTORE, STATE, ComponentRef, Routing
from spark_bridge.stages import KeyStage, is_pseudo_key, unpack
from sr3.codec import decode_key, decode_value, encode_key, encode_value
from sr3.key_state import ROUTE_FIELD
from topology_api.java_hash import key_task_index, route_hash

TOPOLOGY = Path(__file__).parents[2] / "e2e" / "topologies" / "state_keys.py"
VISITS = [(3, "home"), (3, "cart"), (-4, "home"), (3, "home"), (17, "help")]
NOWHERE = Routing(frozenset(), frozenset())


def emit_rows(visits: list[tuple[int, str]]) -> list[tuple[Any, ...]]:
    task = encode_value(1)
    return [
        ("visits", "default", EMIT, encode_value(list(v)), task, None, f"{n:09d}.0000")
        for n, v in enumerate(visits)
    ]


def keyed(stage: KeyStage, rows: list[tuple[Any, ...]]) -> dict[bytes, list[bytes]]:
    """Return the stage's packs per group key (as Spark's groupBy gathers them)."""
    groups: dict[bytes, list[bytes]] = defaultdict(list)
    for batch in stage.rows(iter([rows])):
        for gkey, packed in batch:
            groups[gkey].append(packed)
    return dict(groups)


def run_stage(
    stage: StatefulStage, groups: dict[bytes, list[bytes]], stored: dict[bytes, bytes]
) -> dict[bytes, bytes | None]:
    """Run every real key's group; return the state rows' blobs per key."""
    out: dict[bytes, bytes | None] = {}
    for gkey, packs in groups.items():
        if is_pseudo_key(gkey):
            continue
        frames = iter([pd.DataFrame({"rows": packs})])
        rows, blob, write = stage.apply(gkey, frames, stored.get(gkey))
        if write:
            stored[gkey] = blob
        out.update({r[4]: r[5] for r in rows if r[2] == STATE})
    return out


@pytest.mark.parametrize("environment", ["p1", "p3"])
def test_an_overridden_state_key_groups_and_stores_its_route(environment: str) -> None:
    ref = ComponentRef(str(TOPOLOGY), "per_page", {}, environment)
    groups = keyed(KeyStage(ref, NOWHERE), emit_rows(VISITS))
    assert set(groups) == {encode_key(v) for v in VISITS}

    stage = StatefulStage(ref, NOWHERE)
    states = run_stage(stage, groups, {})

    tasks = {"p1": 1, "p3": 3}[environment]
    for (user, page), n in Counter(VISITS).items():
        blob = states[encode_key((user, page))]
        assert blob is not None
        route = route_hash([user])
        assert decode_value(blob) == {ROUTE_FIELD: route, "n": n}
        assert stored_route(blob) == route
    hosted = {key_task_index((u,), None, tasks) for u, _p in VISITS}
    assert set(stage._hosts) == hosted


def test_the_default_state_key_stores_no_route() -> None:
    ref = ComponentRef(str(TOPOLOGY), "per_user", {}, "p2")
    groups = keyed(KeyStage(ref, NOWHERE), emit_rows(VISITS))
    states = run_stage(StatefulStage(ref, NOWHERE), groups, {})
    assert {decode_key(k): decode_value(b) for k, b in states.items() if b} == {
        (u,): {"n": n} for u, n in Counter(u for u, _p in VISITS).items()
    }
    assert all(stored_route(b) is None for b in states.values() if b)


def test_a_restored_key_runs_on_the_task_of_its_stored_route() -> None:
    ref = ComponentRef(str(TOPOLOGY), "per_page", {}, "p4")
    route = route_hash([17])
    restored = encode_value({ROUTE_FIELD: route, "n": 5})
    key = encode_key((17, "help"))
    restore = ("per_page", "", RESTORE, None, key, restored, "")
    rows = [*emit_rows([(17, "help")]), restore]
    stage = StatefulStage(ref, NOWHERE)

    states = run_stage(stage, keyed(KeyStage(ref, NOWHERE), rows), {})

    assert decode_value(states[key]) == {ROUTE_FIELD: route, "n": 6}
    assert set(stage._hosts) == {key_task_index((17, "help"), route, 4)}
    # a key only restored (no tuple this batch) goes by its stored route too
    alone = StatefulStage(ref, NOWHERE)
    assert run_stage(alone, keyed(KeyStage(ref, NOWHERE), [restore]), {}) == {}
    assert set(alone._hosts) == {route % 4}


SPLIT = """
from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


class Visits(ReplayableSpout):
    outputs = ["user", "page"]

    def next_tuple(self):
        pass


class PerPage(StatefulBolt):
    outputs = []

    def state_key(self, tup):
        if tup.values[0] == "boom":
            raise ValueError("no key")
        return (tup.values[1],)

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + 1


class Split(Topology):
    visits = Visits.spec(par=1)
    per_page = PerPage.spec(inputs={visits: Grouping.fields("user")}, par=4)
"""


@pytest.fixture
def split(tmp_path: Path) -> str:
    path = tmp_path / f"sb_split_{uuid.uuid4().hex[:8]}.py"
    path.write_text(textwrap.dedent(SPLIT), encoding="utf-8")
    return str(path)


def test_a_state_key_whose_tuples_go_to_two_tasks_is_refused(split: str) -> None:
    ref = ComponentRef(split, "per_page", {})
    # two users the grouping sends to two tasks, both on page "home"
    by_task = {key_task_index((u,), None, 4): u for u in range(20)}
    visits = [(by_task[0], "home"), (by_task[1], "home")]
    groups = keyed(KeyStage(ref, NOWHERE), emit_rows(visits))
    split_error = r"'per_page': state key \['home'\] .* tasks 0 and 1 .*\['user'\]"
    with pytest.raises(ComponentError, match=split_error):
        run_stage(StatefulStage(ref, NOWHERE), groups, {})

    # across batches too: the stored route is task 0's, the new tuple task 1's
    stored = {
        encode_key(("home",)): encode_value(
            {ROUTE_FIELD: route_hash([by_task[0]]), "n": 1}
        )
    }
    groups = keyed(KeyStage(ref, NOWHERE), emit_rows(visits[1:]))
    with pytest.raises(ComponentError, match=split_error):
        run_stage(StatefulStage(ref, NOWHERE), groups, stored)


def test_a_failing_state_key_fails_or_becomes_a_dead_row(split: str) -> None:
    ref = ComponentRef(split, "per_page", {})
    rows = emit_rows([("boom", "home")])
    with pytest.raises(ComponentError, match=r"state_key\(\).*ValueError: no key"):
        keyed(KeyStage(ref, NOWHERE), rows)

    groups = keyed(KeyStage(ref, NOWHERE, on_error="dead-letter"), rows)
    [packed] = [p for gkey, packs in groups.items() for p in packs]
    [dead] = unpack(packed)
    assert dead[2] == DEAD
    assert decode_value(dead[5])["error"] == "ValueError: no key"


def test_a_component_ref_carries_its_environment() -> None:
    ref = ComponentRef(str(TOPOLOGY), "per_page", {"a": 1}, "p3")
    assert ComponentRef.from_options(ref.to_options()) == ref
    plain = ComponentRef(str(TOPOLOGY), "per_page")
    assert ComponentRef.from_options(plain.to_options()) == plain
