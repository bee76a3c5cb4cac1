"""A key-group-routed task restores its key groups from wherever they were."""

from __future__ import annotations

from typing import Any

from backend.keygroup_restore import restore_assigned
from backend.restorer import RestoreReport
from sr3.keygroups import encode_table, range_table
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord

G = 16
KEYS = [(f"k{i}",) for i in range(200)]


class FakeRing:
    """Owners' committed snapshots (one FULL blob set each), and what was read."""

    def __init__(self, table: list[int]) -> None:
        self.blobs: dict[str, dict[int, bytes]] = {}
        self.reads: list[tuple[str, Any]] = []
        states = {i: KeyedState(G) for i in set(table)}
        for key in KEYS:
            kg = states[0].key_group_of(key)
            states[table[kg]].for_key(key)["v"] = key[0]
        for index, state in states.items():
            self.blobs[f"t/c/{index}"] = state.snapshot(incremental=False)

    def restore(
        self, owner: str, record: Any, *, key_group_count: int, mechanism: str
    ) -> tuple[KeyedState, RestoreReport]:
        self.reads.append((owner, "all"))
        state = KeyedState(key_group_count)
        state.install(self.blobs.get(owner, {}))
        return state, RestoreReport(record.epoch, mechanism, "star", 1, 10, 0.0)

    def restore_lazily(self, owner: str, record: Any, **kw: Any) -> Any:
        return self.restore(owner, record, key_group_count=kw["key_group_count"],
                            mechanism=kw["mechanism"])  # fmt: skip

    def read_key_groups(
        self, owner: str, epoch: int, key_groups: Any, cache: Any = None
    ) -> tuple[list[dict[int, bytes]], int]:
        wanted = set(key_groups)
        self.reads.append((owner, sorted(wanted)))
        blobs = self.blobs[owner]
        return [{kg: b for kg, b in blobs.items() if kg in wanted}], 5


def record(tables: dict[str, Any] | None, owners: int) -> CommitRecord:
    return CommitRecord(
        epoch=9,
        owners=tuple(f"t/c/{i}" for i in range(owners)),
        key_groups=tables or {},
    )


def keys_of(state: KeyedState) -> set[tuple[Any, ...]]:
    return {key for key, _fields in state.items()}


def restore(ring: FakeRing, rec: CommitRecord, index: int, table: list[int]) -> Any:
    state, report = restore_assigned(
        ring,  # type: ignore[arg-type]
        topology="t",
        component="c",
        index=index,
        table=table,
        record=rec,
        mechanism="star",
    )
    return state, report


def test_a_task_takes_its_key_groups_from_where_the_record_put_them() -> None:
    before = range_table(2, G)
    ring = FakeRing(before)
    rec = record({"c": encode_table(before)}, owners=2)
    after = list(before)
    for kg in range(4, 8):  # four of task 0's key groups to a new task 2
        after[kg] = 2
    for index in range(3):
        state, _report = restore(ring, rec, index, after)
        mine = {k for k in KEYS if after[state.key_group_of(k)] == index}
        assert keys_of(state) == mine
    # the new task read only the moving key groups, from task 0's owner
    assert ("t/c/0", [4, 5, 6, 7]) in ring.reads


def test_the_records_own_table_is_a_plain_restore() -> None:
    table = range_table(2, G)
    ring = FakeRing(table)
    state, report = restore(ring, record({"c": encode_table(table)}, 2), 1, table)
    assert report.used == "star"
    assert ring.reads == [("t/c/1", "all")]
    assert keys_of(state) == {k for k in KEYS if table[state.key_group_of(k)] == 1}


def test_a_record_without_a_table_is_read_whole_and_filtered() -> None:
    # written by fields routing: say every key on owner 0 of 1
    ring = FakeRing([0] * G)
    table = range_table(2, G)
    state, report = restore(ring, record(None, 1), 1, table)
    assert "fields-routed" in report.used
    assert keys_of(state) == {k for k in KEYS if table[state.key_group_of(k)] == 1}
