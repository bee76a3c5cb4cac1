"""Which committed owners a rescaled task reads: only those that can hold its keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from backend.rescale import candidate_owners


def _owners(n: int) -> list[str]:
    return [f"wc/count/{i}" for i in range(n)]


@given(
    old=st.integers(min_value=1, max_value=12),
    new=st.integers(min_value=1, max_value=12),
    route_hash=st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_every_key_is_found_among_the_owners_its_new_task_reads(
    old: int, new: int, route_hash: int
) -> None:
    # a key lives on task hash mod count (Storm's fields grouping, floorMod)
    holder = f"wc/count/{route_hash % old}"
    assert holder in candidate_owners(_owners(old), route_hash % new, new)


def test_a_new_task_reads_old_over_gcd_owners() -> None:
    assert candidate_owners(_owners(2), 3, 4) == ["wc/count/1"]
    assert candidate_owners(_owners(4), 1, 2) == ["wc/count/1", "wc/count/3"]
    assert candidate_owners(_owners(3), 0, 4) == _owners(3)  # coprime: all
    assert candidate_owners(_owners(3), 2, 3) == ["wc/count/2"]  # same count: its own
