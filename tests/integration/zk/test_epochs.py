"""Native-mode epoch records on a real ZooKeeper: what survives a session expiry."""

from __future__ import annotations

from collections.abc import Callable

from zk.client import ZkSession
from zk.epochs import ZkEpochStore


def test_a_report_made_as_the_session_expires_is_written_in_the_new_one(
    zk_session: ZkSession, expire_server_side: Callable[[ZkSession], int]
) -> None:
    store = ZkEpochStore(zk_session, "wc")
    store.report("pause-3-1", "lines/0", {"offset": 10})
    old = expire_server_side(zk_session)
    store.report("pause-4-1", "lines/0", {"offset": 20})
    assert zk_session.session_id != old
    assert store.reports("pause-4-1") == {"lines/0": {"offset": 20}}
    assert store.reports("pause-3-1") == {"lines/0": {"offset": 10}}


def test_a_rollback_asked_as_the_session_expires_is_asked_in_the_new_one(
    zk_session: ZkSession, expire_server_side: Callable[[ZkSession], int]
) -> None:
    store = ZkEpochStore(zk_session, "wc")
    assert store.request_rollback(0) == 1
    old = expire_server_side(zk_session)
    # a failed tree of generation 1: one rollback more, in the new session
    assert store.request_rollback(1) == 2
    assert zk_session.session_id != old
    # another failure of generation 1 finds its rollback already asked for
    assert store.request_rollback(1) == 2
    assert store.generation() == 2  # one bump per failed generation
