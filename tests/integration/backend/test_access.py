"""RingAccess against a real lab: committed state read back through the ring."""

from __future__ import annotations

import pytest

from backend.access import RingAccess
from sr3.config import Sr3Config
from sr3.state import KeyedState
from sr3_cli.lab import Lab
from zk.checkpoints import CommitRecord

pytestmark = [pytest.mark.zk]


def test_committed_state_keeps_keys_python_holds_equal_apart(lab: Lab) -> None:
    # (1,), (1.0,) and (True,) are three state keys; a dict merged them into one
    state = KeyedState(4)
    for n, key in enumerate([(1,), (1.0,), (True,), ("1",)]):
        state.for_key(key)["n"] = n
    ring = RingAccess(lab.config(Sr3Config()))
    try:
        ring.write(
            owner="t/c/0",
            epoch=1,
            key_group_count=4,
            key_groups=state.snapshot(incremental=False).items(),
            kind="full",
            offsets={},
        )
        ring.checkpoints.commit("t", CommitRecord(epoch=1, owners=("t/c/0",)))
        epoch, committed = ring.committed_state("t", "c")
        _, dump = ring.committed_dump("t", "c")
    finally:
        ring.close()
    assert epoch == 1
    assert len(committed) == 4
    assert sorted((repr(k), f["n"]) for k, f in committed.items()) == [
        ("('1',)", 3),
        ("(1,)", 0),
        ("(1.0,)", 1),
        ("(True,)", 2),
    ]
    assert committed[(True,)] == {"n": 2}
    assert committed[(1.0,)] == {"n": 1}
    assert (2,) not in committed
    assert len(dump) == len(committed)


def test_committed_state_follows_a_commit_that_collects_the_epoch_read(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a running topology commits epoch 2 and collects epoch 1 between the
    # reader's look at the commit record and its read of epoch 1's manifest
    ring = RingAccess(lab.config(Sr3Config()))

    def write(epoch: int, count: int) -> None:
        state = KeyedState(4)
        state.for_key(("w",))["n"] = count
        ring.write(
            owner="race/c/0",
            epoch=epoch,
            key_group_count=4,
            key_groups=state.snapshot(incremental=False).items(),
            kind="full",
            offsets={},
        )
        ring.checkpoints.commit("race", CommitRecord(epoch=epoch, owners=("race/c/0",)))

    try:
        write(1, 10)
        committed = ring.checkpoints.committed
        raced = []

        def commit_then_read(topology: str) -> CommitRecord | None:
            record = committed(topology)
            if not raced:
                raced.append(True)
                write(2, 20)
                ring.collect_garbage("race/c/0", 2)
            return record

        monkeypatch.setattr(ring.checkpoints, "committed", commit_then_read)
        epoch, state = ring.committed_state("race", "c")
    finally:
        ring.close()
    assert (epoch, state[("w",)]) == (2, {"n": 20})
