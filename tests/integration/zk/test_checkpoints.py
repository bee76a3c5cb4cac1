"""The commit record on a real ZooKeeper: read again across a session expiry."""

from __future__ import annotations

from collections.abc import Callable

from zk.checkpoints import CommitRecord, ZkCheckpointStore
from zk.client import ZkSession


def test_the_commit_read_as_the_session_expires_is_read_in_the_new_one(
    zk_session: ZkSession, expire_server_side: Callable[[ZkSession], int]
) -> None:
    store = ZkCheckpointStore(zk_session)
    store.commit("wc", CommitRecord(epoch=7, offsets={"lines/0": 70}, owners=()))
    old = expire_server_side(zk_session)
    record = store.committed("wc")
    assert zk_session.session_id != old
    assert record is not None
    assert (record.epoch, dict(record.offsets)) == (7, {"lines/0": 70})
