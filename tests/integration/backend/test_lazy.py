"""Lazy restore against a real lab: key groups on demand, the rest in the background."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import pytest

from backend.access import RingAccess
from backend.lazy import LAZY_FETCH, ChainLoader, LoadStats
from sr3.config import Sr3Config
from sr3.keygroups import key_group
from sr3.recovery import PlannedTransfer, Recoverer, RecoveryContext
from sr3.recovery.base import EventHook
from sr3.recovery.pieces import Assembly, Blob
from sr3.state import KeyedState
from sr3_cli.lab import Lab
from zk.checkpoints import CommitRecord

pytestmark = [pytest.mark.zk]

OWNER = "lazy/store/0"
G = 64
KEYS = 600


def _open(lab: Lab) -> RingAccess:
    # small shards: the chain has many, each with a few key groups
    config = lab.config(Sr3Config())
    return RingAccess(replace(config, ring=replace(config.ring, max_shard_bytes=4096)))


def _write_chain(ring: RingAccess) -> KeyedState:
    """Epoch 1 full, epoch 2 a delta (changes and deletes); commit 2; return it."""
    state = KeyedState(G)
    for n in range(KEYS):
        state.for_key((f"k{n}",))["v"] = "x" * 40 + str(n)
    ring.write(
        owner=OWNER,
        epoch=1,
        key_group_count=G,
        key_groups=state.snapshot(incremental=False).items(),
        kind="full",
        offsets={},
    )
    state.mark_clean()
    for n in range(0, KEYS, 7):
        state.for_key((f"k{n}",))["v"] = f"changed {n}"
    for n in range(3, KEYS, 11):
        state.for_key((f"k{n}",)).clear()
    ring.write(
        owner=OWNER,
        epoch=2,
        key_group_count=G,
        key_groups=state.snapshot(incremental=True).items(),
        kind="delta",
        offsets={},
    )
    state.mark_clean()
    ring.checkpoints.commit("lazy", CommitRecord(epoch=2, owners=(OWNER,)))
    return state


def _rows(state: KeyedState) -> dict[tuple[object, ...], dict[str, object]]:
    return dict(state.items())


def test_a_key_is_served_before_the_rest_of_the_chain_arrives(lab: Lab) -> None:
    ring = _open(lab)
    try:
        expected = _rows(_write_chain(ring))
        manifest = ring.manifests.manifest(OWNER, 2)
        loader = ChainLoader(ring.store, manifest, ring.manifests.shards(OWNER))
        state = KeyedState(G)
        state.defer(loader.key_groups, loader)
        # no background fetch: only what the touched keys need is read
        assert state.for_key(("k7",))["v"] == "changed 7"
        assert state.for_key(("k21",))["v"] == "changed 21"
        assert dict(state.for_key(("k3",))) == {}  # deleted by the delta
        assert state.for_key(("k1",))["v"] == "x" * 40 + "1"
        fetched = loader.on_demand_shards
        assert 0 < fetched < len(manifest.shard_ids)
        assert state.deferred
        state.for_key(("k1",))["v"] = "written while loading"
        # a full snapshot taken while key groups are still on the ring holds them
        full = state.snapshot(incremental=False)
        assert not state.deferred
        rebuilt = KeyedState(G)
        rebuilt.install(full)
        assert _rows(rebuilt) == {**expected, ("k1",): {"v": "written while loading"}}
    finally:
        ring.close()


def test_a_tuple_waits_for_its_own_key_groups_bytes_only(lab: Lab) -> None:
    ring = _open(lab)
    try:
        _write_chain(ring)
        manifest = ring.manifests.manifest(OWNER, 2)
        metas = ring.manifests.shards(OWNER)
        loader = ChainLoader(ring.store, manifest, metas)
        state = KeyedState(G)
        state.defer(loader.key_groups, loader)
        assert state.for_key(("k7",))["v"] == "changed 7"
        kg = key_group(("k7",), G)
        holding = [
            metas[sid] for sid in manifest.shard_ids if kg in metas[sid].key_groups
        ]
        assert len(holding) == 2  # the base and the delta
        spans = [meta.span(kg) for meta in holding]
        own = sum(span[1] for span in spans if span is not None)
        assert None not in spans
        # only the key group's blobs travelled, not the shards that hold them
        assert loader.bytes_read == own < sum(meta.size for meta in holding)
        assert loader.on_demand_shards == 2
        # shards recorded before spans existed are read whole, with the same result
        old = {sid: replace(meta, spans=()) for sid, meta in metas.items()}
        whole = ChainLoader(ring.store, manifest, old)
        again = KeyedState(G)
        again.defer(whole.key_groups, whole)
        assert again.for_key(("k7",))["v"] == "changed 7"
        assert whole.bytes_read == sum(meta.size for meta in holding)
    finally:
        ring.close()


def test_lazy_and_eager_restores_give_the_same_state(lab: Lab) -> None:
    ring = _open(lab)
    try:
        expected = _rows(_write_chain(ring))
        record = ring.committed("lazy")
        arrived = threading.Event()
        stats: list[LoadStats] = []

        def loaded(got: LoadStats) -> None:
            stats.append(got)
            arrived.set()

        lazy, report = ring.restorer.restore_lazily(
            OWNER, record, key_group_count=G, mechanism="auto", on_loaded=loaded
        )
        eager, _ = ring.restorer.restore(
            OWNER, record, key_group_count=G, mechanism="auto"
        )
        assert report.used == LAZY_FETCH
        assert report.shards > 1
        assert arrived.wait(60), "the background load never finished"
        assert stats[0].shards == report.shards
        assert stats[0].bytes_read == report.bytes_read
        assert _rows(lazy) == _rows(eager) == expected
    finally:
        ring.close()


def test_a_restore_with_nothing_committed_is_empty_and_not_deferred(
    lab: Lab,
) -> None:
    ring = _open(lab)
    try:
        state, report = ring.restorer.restore_lazily(
            OWNER, None, key_group_count=G, mechanism="auto"
        )
    finally:
        ring.close()
    assert report.epoch is None
    assert not state.deferred
    assert _rows(state) == {}


class _GatedTransfer(PlannedTransfer):
    """The planner's transfer, held until the test opens it; records its events."""

    gate: threading.Event
    events: list[tuple[str, dict[str, Any]]]

    def run(
        self,
        on_key_group: Callable[[int, list[Blob]], None],
        on_event: EventHook | None = None,
    ) -> Assembly:
        assert self.gate.wait(60), "the test never opened the transfer"
        return super().run(
            on_key_group, on_event=lambda kind, info: self.events.append((kind, info))
        )


def _gated(planned: PlannedTransfer) -> _GatedTransfer:
    gated = _GatedTransfer(
        **{f.name: getattr(planned, f.name) for f in fields(planned)}
    )
    gated.gate = threading.Event()
    gated.events = []
    return gated


@pytest.mark.parametrize("mechanism", ["star", "line", "tree"])
def test_the_background_load_runs_the_planners_structure(
    lab: Lab, mechanism: str
) -> None:
    ring = _open(lab)
    try:
        expected = _rows(_write_chain(ring))
        context = RecoveryContext(
            manifests=ring.manifests,
            members=ring.members,
            pool=ring.pool,
            node_config=ring.config.node,
            recovery=replace(ring.config.recovery, mechanism=mechanism),
        )
        planned = _gated(Recoverer(context).plan_transfer(OWNER, epoch=2))
        assert planned.decision.mechanism == mechanism
        arrived = threading.Event()
        stats: list[LoadStats] = []

        def loaded(got: LoadStats) -> None:
            stats.append(got)
            arrived.set()

        manifest = ring.manifests.manifest(OWNER, 2)
        loader = ChainLoader(
            ring.store,
            manifest,
            ring.manifests.shards(OWNER),
            on_loaded=loaded,
            plan=lambda: planned,
        )
        state = KeyedState(G)
        state.defer(loader.key_groups, loader)
        loader.start()
        # needed before the background brought it: fetched on demand, at once
        assert state.for_key(("k7",))["v"] == "changed 7"
        assert dict(state.for_key(("k3",))) == {}  # deleted by the delta
        assert loader.on_demand_shards > 0
        planned.gate.set()
        assert arrived.wait(60), "the background load never finished"
        plans = [info for kind, info in planned.events if kind == "plan"]
        assert [p["mechanism"] for p in plans] == [mechanism]
        assert any(kind == "data" for kind, _ in planned.events)
        assert stats[0].on_demand == loader.on_demand_shards
        assert stats[0].transfer == mechanism
        assert f"by {mechanism} in the background" in stats[0].reason
        assert _rows(state) == expected
    finally:
        ring.close()


@pytest.mark.parametrize("mechanism", ["star", "line", "tree"])
def test_a_lazy_restore_reports_the_structure_of_its_background_load(
    lab: Lab, mechanism: str
) -> None:
    ring = _open(lab)
    try:
        expected = _rows(_write_chain(ring))
        record = ring.committed("lazy")
        arrived = threading.Event()
        stats: list[LoadStats] = []

        def loaded(got: LoadStats) -> None:
            stats.append(got)
            arrived.set()

        state, report = ring.restorer.restore_lazily(
            OWNER,
            record,
            key_group_count=G,
            mechanism=mechanism,
            on_loaded=loaded,
        )
        assert report.used == LAZY_FETCH
        # planned on the loader's thread: the restore returns before the plan
        assert report.transfer == report.to_dict()["transfer"] == ""
        assert "planned and brought in the background" in report.reason
        assert state.for_key(("k21",))["v"] == "changed 21"
        assert arrived.wait(60), "the background load never finished"
        assert stats[0].transfer == mechanism
        assert f"by {mechanism} in the background" in stats[0].reason
        assert _rows(state) == expected
    finally:
        ring.close()


def test_a_key_is_served_while_still_planning_and_a_failed_plan_falls_back(
    lab: Lab,
) -> None:
    ring = _open(lab)
    try:
        expected = _rows(_write_chain(ring))
        planning = threading.Event()
        gate = threading.Event()

        def plan() -> PlannedTransfer:
            planning.set()
            gate.wait(60)  # a slow planner: probing holders under auto
            msg = "no live holder answered the probe"
            raise RuntimeError(msg)

        arrived = threading.Event()
        stats: list[LoadStats] = []

        def loaded(got: LoadStats) -> None:
            stats.append(got)
            arrived.set()

        loader = ChainLoader(
            ring.store,
            ring.manifests.manifest(OWNER, 2),
            ring.manifests.shards(OWNER),
            on_loaded=loaded,
            plan=plan,
        )
        state = KeyedState(G)
        state.defer(loader.key_groups, loader)
        loader.start()
        assert planning.wait(30)
        # the plan is not made yet: the key's shards are fetched on demand
        assert state.for_key(("k28",))["v"] == "changed 28"
        assert not arrived.is_set()
        gate.set()
        assert arrived.wait(60), "the shard-by-shard fallback never finished"
        assert stats[0].transfer == ""
        assert "no transfer planned (no live holder answered the probe)" in (
            stats[0].reason
        )
        assert _rows(state) == expected
    finally:
        ring.close()
