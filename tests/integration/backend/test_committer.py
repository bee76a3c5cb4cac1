"""EpochCommitter against a real lab: retained commits stay restorable."""

from __future__ import annotations

import pytest

from backend.access import RingAccess
from backend.committer import EpochCommitter, StartPoint, start_record
from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3.state import KeyedState
from sr3_cli.lab import Lab
from zk.checkpoints import CommitRecord

pytestmark = [pytest.mark.zk]

OWNER = "kept/count/0"
OWNER1 = "kept1/count/0"


def commit(
    ring: RingAccess, committer: EpochCommitter, epoch: int, owner: str = OWNER
) -> None:
    state = KeyedState(4)
    state.for_key(("w",))["n"] = epoch * 10
    ring.write(
        owner=owner,
        epoch=epoch,
        key_group_count=4,
        key_groups=state.snapshot(incremental=False).items(),
        kind="full",
        offsets={"lines/0": epoch},
    )
    record = CommitRecord(epoch=epoch, offsets={"lines/0": epoch}, owners=(owner,))
    committer.commit(record)


def test_the_last_n_commits_stay_restorable_and_older_ones_are_collected(
    lab: Lab,
) -> None:
    ring = RingAccess(lab.config(Sr3Config()))
    committer = EpochCommitter(ring, "kept", background=False, retain=3)
    try:
        first = committer.start()
        epochs = list(range(first, first + 5))
        for epoch in epochs:
            commit(ring, committer, epoch)
        kept = epochs[-3:]
        # the older commits' manifests went with the collections
        assert ring.manifests.epochs(OWNER) == kept
        assert [r.epoch for r in ring.checkpoints.retained("kept")] == kept
        record = start_record(ring, "kept", StartPoint(epoch=kept[0]))
        assert (record.epoch, record.offsets) == (kept[0], {"lines/0": kept[0]})
        with pytest.raises(ConfigError, match=r"sr3\.checkpoint\.retain"):
            start_record(ring, "kept", StartPoint(epoch=epochs[1]))
        # a run from the oldest retained commit starts from its state
        committer.start(start_from=StartPoint(epoch=kept[0]))
        _epoch, state = ring.committed_state("kept", "count")
        assert state[("w",)] == {"n": kept[0] * 10}
    finally:
        committer.close()
        ring.close()


def test_by_default_only_the_last_commit_is_kept(lab: Lab) -> None:
    ring = RingAccess(lab.config(Sr3Config()))
    committer = EpochCommitter(ring, "kept1", background=False)
    try:
        first = committer.start()
        for epoch in range(first, first + 3):
            commit(ring, committer, epoch, OWNER1)
        assert ring.manifests.epochs(OWNER1) == [first + 2]
        assert ring.checkpoints.retained("kept1") == []
    finally:
        committer.close()
        ring.close()


def test_a_fixed_component_resumes_only_at_its_committed_task_count(
    lab: Lab,
) -> None:
    ring = RingAccess(lab.config(Sr3Config()))
    committer = EpochCommitter(ring, "fixed", background=False, retain=2)
    why = "its outputs are per task"
    try:
        first = committer.start()
        for index in (0, 1):
            state = KeyedState(4)
            state.for_key(("out", index))["v"] = index
            ring.write(
                owner=f"fixed/sink/{index}",
                epoch=first,
                key_group_count=4,
                key_groups=state.snapshot(incremental=False).items(),
                kind="full",
                offsets={"lines/0": first},
            )
        record = CommitRecord(
            epoch=first,
            offsets={"lines/0": first},
            owners=("fixed/sink/0", "fixed/sink/1"),
        )
        committer.commit(record)
        for start_from in (None, StartPoint(epoch=first)):
            with pytest.raises(ConfigError) as refused:
                committer.start(
                    resume=True, start_from=start_from, fixed={"sink": (3, why)}
                )
            says = str(refused.value)
            assert "'sink' of topology 'fixed'" in says
            assert "with 2 task(s) and would start from it with 3" in says
            assert why in says
            # nothing changed: the same epoch is still the committed one
            kept = committer.committed()
            assert kept is not None
            assert (kept.epoch, kept.owners) == (first, record.owners)
        assert committer.start(resume=True, fixed={"sink": (2, why)}) == first + 1
        # a fresh start (no resume) is free to use any count
        assert committer.start(fixed={"sink": (3, why)}) > first
    finally:
        committer.close()
        ring.close()
