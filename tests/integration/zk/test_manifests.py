"""ZkManifestStore: atomic publish, holder compare-and-set, drop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from sr3.codec import pack_meta
from sr3.errors import CodecError, CoordinationError
from sr3.manifest import Manifest, ShardMeta, shard_id_for
from sr3.ports import ManifestStore
from zk.client import ZkSession
from zk.manifests import ZkManifestStore

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

OWNER = "wordcount/counter/3"  # '/' in owners, '@' and '#' in shard ids


def shard(
    epoch: int, seq: int = 0, *, owner: str = OWNER, kind: str = "full"
) -> ShardMeta:
    return ShardMeta(
        shard_id=shard_id_for(owner, epoch, seq),
        owner=owner,
        epoch=epoch,
        size=100 + seq,
        crc32=epoch * 1000 + seq,
        key_groups=(seq, seq + 1),
        kind=kind,
        holders=("n1", "n2"),
    )


def manifest(
    epoch: int, shards: list[ShardMeta], *, base: int | None = None, g: int = 16
) -> Manifest:
    return Manifest(
        owner=OWNER,
        epoch=epoch,
        key_group_count=g,
        shard_ids=tuple(s.shard_id for s in shards),
        base_epoch=epoch if base is None else base,
        offsets={"spout": epoch},
        created_at=1.5,
        extra={"engine": "test"},
    )


@pytest.fixture
def store(zk_session: ZkSession) -> ZkManifestStore:
    return ZkManifestStore(zk_session)


def snapshot(store: ZkManifestStore) -> tuple[Any, ...]:
    """Everything a reader can see of OWNER."""
    return (
        store.owners(),
        store.key_group_count(OWNER),
        store.epochs(OWNER),
        store.latest(OWNER),
        store.shards(OWNER),
    )


def test_new_store_is_empty(store: ZkManifestStore) -> None:
    port: ManifestStore = store
    assert port.owners() == []
    assert port.key_group_count(OWNER) is None
    assert port.latest(OWNER) is None
    assert port.epochs(OWNER) == []
    assert port.shards(OWNER) == {}
    port.drop(OWNER, [1], ["x"])  # nothing to drop: no error


def test_publish_and_read_back(store: ZkManifestStore) -> None:
    s1a, s1b = shard(1, 0), shard(1, 1)
    m1 = manifest(1, [s1a, s1b])
    store.publish(m1, [s1a, s1b])
    s2 = shard(2, 0, kind="delta")
    m2 = manifest(2, [s1a, s1b, s2], base=1)
    store.publish(m2, [s2])

    assert store.owners() == [OWNER]
    assert store.key_group_count(OWNER) == 16
    assert store.epochs(OWNER) == [1, 2]
    assert store.latest(OWNER) == m2
    assert store.manifest(OWNER, 1) == m1
    assert store.shards(OWNER) == {s.shard_id: s for s in (s1a, s1b, s2)}


def test_a_damaged_record_names_its_znode(
    store: ZkManifestStore, zk_session: ZkSession
) -> None:
    s1 = shard(1)
    store.publish(manifest(1, [s1]), [s1])
    paths = zk_session.paths
    zk_session.client.set(paths.epoch(OWNER, 1), b"\x00garbage")
    zk_session.client.set(paths.shard(OWNER, s1.shard_id), b"\x01\xc1")
    with pytest.raises(CodecError, match="metadata format version 0") as info:
        store.manifest(OWNER, 1)
    assert paths.absolute(paths.epoch(OWNER, 1)) in str(info.value)
    with pytest.raises(CodecError, match="malformed metadata") as info:
        store.shards(OWNER)
    assert paths.absolute(paths.shard(OWNER, s1.shard_id)) in str(info.value)


def test_missing_epoch_is_an_error(store: ZkManifestStore) -> None:
    store.publish(manifest(1, [shard(1)]), [shard(1)])
    with pytest.raises(CoordinationError, match="does not exist") as info:
        store.manifest(OWNER, 5)
    assert info.value.retriable is False


def test_g_mismatch_writes_nothing(store: ZkManifestStore) -> None:
    store.publish(manifest(1, [shard(1)]), [shard(1)])
    before = snapshot(store)
    with pytest.raises(CoordinationError, match="G=16") as info:
        store.publish(manifest(2, [shard(2)], g=32), [shard(2)])
    assert info.value.retriable is False
    assert snapshot(store) == before


def test_duplicate_or_older_epoch_writes_nothing(store: ZkManifestStore) -> None:
    store.publish(manifest(5, [shard(5)]), [shard(5)])
    before = snapshot(store)
    for epoch in (5, 4):
        again = manifest(epoch, [shard(5), shard(5, 1)], base=5)
        with pytest.raises(CoordinationError, match="not newer"):
            store.publish(again, [shard(5, 1)])
        assert snapshot(store) == before


def test_republishing_a_shard_rolls_the_whole_epoch_back(
    store: ZkManifestStore,
) -> None:
    store.publish(manifest(1, [shard(1)]), [shard(1)])
    before = snapshot(store)
    m2 = manifest(2, [shard(1), shard(2)], base=1)
    with pytest.raises(CoordinationError, match="recorded already"):
        store.publish(m2, [shard(2), shard(1)])  # shard(2) would be created first
    assert snapshot(store) == before


def test_existing_epoch_znode_rolls_back(
    store: ZkManifestStore, zk_session: ZkSession
) -> None:
    store.publish(manifest(1, [shard(1)]), [shard(1)])
    # An epoch znode that is not the latest (only a buggy writer makes one).
    zk_session.client.create(zk_session.paths.epoch(OWNER, 2), b"")
    before = store.shards(OWNER)
    with pytest.raises(CoordinationError, match="epoch exists already"):
        store.publish(manifest(2, [shard(2)]), [shard(2)])
    assert store.shards(OWNER) == before
    assert store.latest(OWNER) == manifest(1, [shard(1)])


def test_concurrent_first_publish_has_one_winner(
    zk_connect: Callable[..., ZkSession],
) -> None:
    stores = [ZkManifestStore(zk_connect()) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def race(i: int) -> None:
        s = shard(1, i)
        barrier.wait()
        try:
            stores[i].publish(manifest(1, [s]), [s])
            outcomes.append("won")
        except CoordinationError as exc:
            outcomes.append(
                "lost" if exc.retriable or "not newer" in str(exc) else str(exc)
            )

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 3 + ["won"]
    latest = stores[0].latest(OWNER)
    assert latest is not None
    assert list(stores[0].shards(OWNER)) == list(latest.shard_ids)


def test_shards_of_another_owner_are_refused(store: ZkManifestStore) -> None:
    stranger = shard(1, owner="other")
    with pytest.raises(CoordinationError, match="other owners"):
        store.publish(manifest(1, [stranger]), [stranger])
    assert store.owners() == []


def test_oversized_transaction_is_refused(store: ZkManifestStore) -> None:
    many = [shard(1, i) for i in range(2000)]
    many = [s.with_holders([f"node-{j:04d}" for j in range(40)]) for s in many]
    with pytest.raises(CoordinationError, match="1 MB request limit"):
        store.publish(manifest(1, many), many)
    assert store.owners() == []


def test_retry_after_a_committed_attempt_is_idempotent(store: ZkManifestStore) -> None:
    m1 = manifest(1, [shard(1)])
    store.publish(m1, [shard(1)])
    body = pack_meta(m1.to_dict())
    store._publish_once(m1, body, [], retried=True)  # as after a lost reply
    with pytest.raises(CoordinationError, match="not newer"):
        store._publish_once(m1, body, [], retried=False)
    assert store.epochs(OWNER) == [1]


def test_update_holders(store: ZkManifestStore) -> None:
    s = shard(1)
    store.publish(manifest(1, [s]), [s])
    updated = store.update_holders(OWNER, s.shard_id, lambda h: [*h, "n3"])
    assert updated.holders == ("n1", "n2", "n3")
    assert store.shards(OWNER)[s.shard_id] == updated
    same = store.update_holders(OWNER, s.shard_id, lambda h: h)
    assert same == updated
    with pytest.raises(CoordinationError, match="no such shard") as info:
        store.update_holders(OWNER, "nope", lambda h: h)
    assert info.value.retriable is False


def adding(holder: str) -> Callable[[tuple[str, ...]], list[str]]:
    return lambda holders: [*holders, holder]


def test_update_holders_compare_and_set_under_concurrency(
    zk_connect: Callable[..., ZkSession],
) -> None:
    s = shard(1)
    ZkManifestStore(zk_connect()).publish(manifest(1, [s]), [s])
    stores = [ZkManifestStore(zk_connect()), ZkManifestStore(zk_connect())]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def add_many(i: int) -> None:
        barrier.wait()
        try:
            for k in range(25):
                stores[i].update_holders(OWNER, s.shard_id, adding(f"t{i}-{k}"))
        except CoordinationError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add_many, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    holders = stores[0].shards(OWNER)[s.shard_id].holders
    assert len(holders) == 2 + 50
    assert set(holders) == {"n1", "n2"} | {
        f"t{i}-{k}" for i in range(2) for k in range(25)
    }


def test_cached_shard_records_follow_every_writer(
    zk_connect: Callable[..., ZkSession],
) -> None:
    reader, writer = ZkManifestStore(zk_connect()), ZkManifestStore(zk_connect())
    s1, s2 = shard(1), shard(2)
    writer.publish(manifest(1, [s1]), [s1])
    assert reader.shards(OWNER) == {s1.shard_id: s1}
    assert reader.shards(OWNER) == {s1.shard_id: s1}  # served from the cache

    # another process's repair moves holders: the reader sees it at once
    moved = writer.update_holders(OWNER, s1.shard_id, lambda h: ["n3", *h[1:]])
    assert reader.shards(OWNER)[s1.shard_id].holders == ("n3", "n2")
    assert reader.shards(OWNER) == {s1.shard_id: moved}

    writer.publish(manifest(2, [s1, s2], base=1), [s2])
    assert set(reader.shards(OWNER)) == {s1.shard_id, s2.shard_id}
    writer.publish(manifest(3, [s2]), [])
    writer.drop(OWNER, [1, 2], [s1.shard_id])
    assert set(reader.shards(OWNER)) == {s2.shard_id}

    # a caller mutating what it got does not poison the cache
    got = reader.shards(OWNER)
    got.clear()
    assert set(reader.shards(OWNER)) == {s2.shard_id}
    assert reader.shards("nobody") == {}


def test_drop_old_epochs_and_unreferenced_shards(store: ZkManifestStore) -> None:
    s1, s2, s3 = shard(1), shard(2, kind="delta"), shard(3)
    store.publish(manifest(1, [s1]), [s1])
    store.publish(manifest(2, [s1, s2], base=1), [s2])
    store.publish(manifest(3, [s3]), [s3])  # compaction: a new base

    with pytest.raises(CoordinationError, match="is the latest"):
        store.drop(OWNER, [3], [])
    with pytest.raises(CoordinationError, match="still reference"):
        store.drop(OWNER, [1], [s1.shard_id])  # epoch 2 still needs s1
    assert store.epochs(OWNER) == [1, 2, 3]

    store.drop(OWNER, [1, 2], [s1.shard_id, s2.shard_id])
    assert store.epochs(OWNER) == [3]
    assert store.shards(OWNER) == {s3.shard_id: s3}
    assert store.latest(OWNER) == manifest(3, [s3])
    store.drop(OWNER, [1, 2], [s1.shard_id, s2.shard_id])  # repeatable


def test_drop_many_in_batches(store: ZkManifestStore) -> None:
    shards = [shard(1, i) for i in range(700)]
    store.publish(manifest(1, shards), shards)
    store.publish(manifest(2, [shard(2)]), [shard(2)])
    store.drop(OWNER, [1], [s.shard_id for s in shards])
    assert store.epochs(OWNER) == [2]
    assert list(store.shards(OWNER)) == [shard(2).shard_id]
