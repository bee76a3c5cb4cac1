"""Native-mode epoch records on a real ZooKeeper: what survives a session expiry."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from zk.client import ZkSession
from zk.epochs import ZkEpochStore

#: Report znodes the reset deletes: enough to be mid-way when ZooKeeper stops.
RECORDS = 3000


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


@pytest.mark.slow
def test_a_fresh_runs_reset_outlasts_a_zookeeper_restart_in_its_midst(
    zk_connect: Callable[..., ZkSession],
    zk_restart: Callable[..., None],
    wait_until: Any,
) -> None:
    # A run that starts as ZooKeeper restarts (a chaos campaign's restart-zk
    # at 0.4 s) clears the topology's native records once it is back, instead
    # of giving up on the ConnectionLoss of a request in flight. Many records,
    # so that the recursive delete is still going when the server stops.
    session = zk_connect(session_timeout_s=20.0)
    store = ZkEpochStore(session, "wc")
    steps = session.paths.native_reports("wc")
    pending = [
        session.client.create_async(f"{steps}/s{n}/lines%2F0", b"x", makepath=True)
        for n in range(RECORDS)
    ]
    for result in pending:
        result.get(timeout=30)
    outcome: list[BaseException | None] = []

    def reset_now() -> None:
        try:
            store.reset()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    resetting = threading.Thread(target=reset_now)
    resetting.start()
    wait_until(
        lambda: len(session.client.get_children(steps)) < RECORDS,
        what="the delete to begin",
    )
    zk_restart(1.5)
    resetting.join(timeout=60.0)
    assert outcome == [None]
    assert session.client.exists(steps) is None
