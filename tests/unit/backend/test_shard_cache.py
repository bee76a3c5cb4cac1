"""The shards a hand-over read stay for the next batches, within a byte budget."""

from __future__ import annotations

from backend.shard_cache import ShardCache


def test_shards_are_kept_until_the_budget_evicts_the_least_recently_used() -> None:
    cache = ShardCache(budget_bytes=100)
    cache.put("a", 40, {1: b"x"})
    cache.put("b", 40, {2: b"y"})
    assert cache.get("a") == {1: b"x"}  # a is now the most recently used
    cache.put("c", 40, {3: b"z"})
    assert cache.get("b") is None
    assert cache.get("a") == {1: b"x"}
    assert cache.get("c") == {3: b"z"}


def test_a_shard_over_the_budget_is_not_kept() -> None:
    cache = ShardCache(budget_bytes=10)
    cache.put("big", 11, {1: b"x"})
    assert cache.get("big") is None
    cache.put("small", 5, {1: b"x"})
    cache.clear()
    assert cache.get("small") is None
