"""ZkSavepointStore: create, read, list, pin and delete named commit records."""

from __future__ import annotations

import pytest

from sr3.codec import pack_meta
from sr3.errors import CodecError, CoordinationError
from sr3.manifest import Manifest, ShardMeta, shard_id_for
from zk.checkpoints import CommitRecord
from zk.client import ZkSession
from zk.manifests import ZkManifestStore
from zk.savepoints import Savepoint, ZkSavepointStore

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

TOPOLOGY = "word/count"  # '/' in names is quoted into one segment


def record(epoch: int, *owners: str) -> CommitRecord:
    return CommitRecord(
        epoch=epoch,
        offsets={"lines/0": epoch * 10},
        owners=owners or (f"{TOPOLOGY}/count/0",),
        extra={"engine": "spark", "query": "q1", "batch": epoch},
    )


@pytest.fixture
def store(zk_session: ZkSession) -> ZkSavepointStore:
    return ZkSavepointStore(zk_session)


def test_create_then_get_round_trips_the_whole_record(store: ZkSavepointStore) -> None:
    made = store.create(TOPOLOGY, "before-v2", record(7))
    got = store.get(TOPOLOGY, "before-v2")
    assert got == made
    assert got.record == record(7)
    assert got.created_at > 0
    assert store.get(TOPOLOGY, "nope") is None
    assert Savepoint.from_dict(made.to_dict()) == made


def test_a_taken_name_is_refused_and_the_first_kept(store: ZkSavepointStore) -> None:
    store.create(TOPOLOGY, "sp", record(3))
    with pytest.raises(CoordinationError, match="has a savepoint 'sp' already") as exc:
        store.create(TOPOLOGY, "sp", record(9))
    assert exc.value.retriable is False
    saved = store.get(TOPOLOGY, "sp")
    assert saved is not None
    assert saved.record.epoch == 3


def test_list_orders_by_epoch_and_pins_per_owner(store: ZkSavepointStore) -> None:
    a, b = f"{TOPOLOGY}/count/0", f"{TOPOLOGY}/count/1"
    store.create(TOPOLOGY, "late", record(12, a))
    store.create(TOPOLOGY, "odd/name", record(5, a, b))
    store.create("other", "late", record(40, "other/count/0"))
    assert [p.name for p in store.savepoints(TOPOLOGY)] == ["odd/name", "late"]
    assert store.pinned_epochs(TOPOLOGY) == {a: {5, 12}, b: {5}}
    assert store.savepoints("nobody") == []
    assert store.pinned_epochs("nobody") == {}
    assert store.topologies_with("late") == ["other", TOPOLOGY]
    assert store.topologies_with("missing") == []


def test_delete_unpins_and_is_idempotent(store: ZkSavepointStore) -> None:
    store.create(TOPOLOGY, "sp", record(3))
    assert store.delete(TOPOLOGY, "sp") is True
    assert store.delete(TOPOLOGY, "sp") is False
    assert store.get(TOPOLOGY, "sp") is None
    assert store.pinned_epochs(TOPOLOGY) == {}


def test_a_damaged_savepoint_is_a_codec_error(
    store: ZkSavepointStore, zk_session: ZkSession
) -> None:
    path = zk_session.paths.savepoint(TOPOLOGY, "bad")
    zk_session.client.create(path, pack_meta({"name": "bad"}), makepath=True)
    with pytest.raises(CodecError, match="malformed savepoint"):
        store.get(TOPOLOGY, "bad")


def test_a_collection_that_read_the_pins_before_a_savepoint_drops_nothing(
    zk_session: ZkSession,
) -> None:
    # the collector reads the pins, a savepoint of epoch 1 is taken, then the
    # collector drops epoch 1 under the pins it read: the drop must refuse
    owner = "race/count/0"
    manifests = ZkManifestStore(zk_session)
    for epoch in (1, 2):
        meta = ShardMeta(shard_id_for(owner, epoch, 0), owner, epoch, 10, 0)
        manifests.publish(
            Manifest(owner, epoch, 4, (meta.shard_id,), base_epoch=epoch), [meta]
        )
    store = ZkSavepointStore(zk_session)
    pinned, guard = store.pins("race")
    assert pinned == {}
    store.create("race", "keep", record(1, owner))
    with pytest.raises(CoordinationError, match="a savepoint was taken") as caught:
        manifests.drop(owner, [1], [shard_id_for(owner, 1, 0)], guard=guard)
    assert caught.value.retriable
    assert manifests.epochs(owner) == [1, 2]
    assert shard_id_for(owner, 1, 0) in manifests.shards(owner)
    # read afresh, the pins keep epoch 1 and a drop of nothing pinned goes through
    pinned, guard = store.pins("race")
    assert pinned == {owner: {1}}
    manifests.drop(owner, [], [], guard=guard)
