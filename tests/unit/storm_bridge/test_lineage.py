"""Tuple lineages and what a stateful task keeps to drop replays (task scope)."""

from __future__ import annotations

from storm_bridge.lineage import LINEAGE_BITS, Dedupe, Emitted, derive, root


def test_a_lineage_is_the_same_each_time_the_tuple_is_made_and_fits_a_java_long() -> (
    None
):
    first = root("lines/0", 17, 0)
    assert first == root("lines/0", 17, 0)
    assert len({first, root("lines/1", 17, 0), root("lines/0", 18, 0)}) == 3
    assert root("lines/0", 17, 1) != first
    child = derive([first], 0)
    assert child == derive([first], 0)
    assert len({child, derive([first], 1), derive([first, 5], 0)}) == 3
    for value in (first, child):
        assert 0 <= value < 1 << LINEAGE_BITS


def _emit(word: str, lineage: int) -> Emitted:
    return Emitted(values=[word, 1], stream=None, direct_task=None, lineage=lineage)


def test_a_processed_lineage_is_known_with_its_emits_until_its_epoch_commits() -> None:
    dedupe = Dedupe(1 << 20)
    dedupe.record(11, [_emit("a", 111)])
    assert dedupe.emits(11) == (_emit("a", 111),)
    assert dedupe.emits(12) is None
    dedupe.close(5, 0)  # SNAPSHOT(5, 0)
    dedupe.record(12, [])
    dedupe.observe("running", 4, 0)  # not yet
    assert dedupe.emits(11) is not None
    dedupe.observe("running", 5, 1)  # another generation: a rollback, not a commit
    assert dedupe.emits(11) is not None
    dedupe.observe("running", 5, 0)  # committed: its replays never come
    assert dedupe.emits(11) is None
    assert dedupe.emits(12) == ()  # processed after the snapshot: kept


def test_a_later_epoch_of_the_same_generation_also_shows_the_commit() -> None:
    dedupe = Dedupe(1 << 20)
    dedupe.record(11, [])
    dedupe.close(5, 2)
    dedupe.observe("snapshot", 5, 2)
    assert dedupe.emits(11) == ()
    dedupe.observe("pause", 6, 2)  # the watch coalesced RUNNING(5, 2) away
    assert dedupe.emits(11) is None


def test_over_its_bound_it_keeps_no_more_emits_and_says_so_until_a_commit() -> None:
    dedupe = Dedupe(2048)
    for n in range(40):
        dedupe.record(n, [_emit("x" * 20, n)])
    report = dedupe.report()
    assert report["over"] is True
    assert report["traced"] is True
    assert report["lineages"] == 40
    assert dedupe.emits(39) == ()  # known processed, its emits not kept
    dedupe.close(1, 0)
    dedupe.observe("running", 1, 0)
    assert dedupe.report()["over"] is False


def test_an_untraced_tuple_is_reported_and_a_restore_forgets_everything() -> None:
    dedupe = Dedupe(1 << 20)
    dedupe.record(1, [])
    dedupe.untraced()
    assert dedupe.report()["traced"] is False
    dedupe.reset()
    assert dedupe.report() == {
        "traced": True,
        "over": False,
        "buffer_bytes": 0,
        "lineages": 0,
        "replays_due": 0,
    }
    assert dedupe.emits(1) is None


def test_what_a_kept_task_processed_ahead_of_the_replay_stays_until_it_comes() -> None:
    # processed after commit 1, then a task-scope rollback to commit 1 kept
    # this task's state: the spouts replay from commit 1's offsets, slowly
    dedupe = Dedupe(1 << 20)
    for lineage in (21, 22, 23):
        dedupe.record(lineage, [_emit("w", lineage * 10)])
    dedupe.close(2, 0)  # SNAPSHOT(2, 0), never committed
    dedupe.keep()
    assert dedupe.report()["replays_due"] == 3
    # the replay reached 21 before epoch 3 of the new generation committed
    assert dedupe.emits(21) == (_emit("w", 210),)
    dedupe.close(3, 1)
    dedupe.observe("running", 3, 1)
    # 22 and 23 lie beyond commit 3's offsets: their replay is still due
    assert dedupe.emits(22) == (_emit("w", 220),)
    assert dedupe.emits(21) is None  # replayed before commit 3: never again
    assert dedupe.report()["replays_due"] == 1
    dedupe.reset()
    assert dedupe.report()["replays_due"] == 0
    assert dedupe.bytes == 0
