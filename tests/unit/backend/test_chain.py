"""When a snapshot is FULL: one rule, whatever the engine."""

from __future__ import annotations

import pytest

from backend.chain import ChainPolicy, OwnerChain
from sr3.errors import ConfigError


def kinds(chain: OwnerChain, snapshots: int) -> list[str]:
    out = []
    for _ in range(snapshots):
        kind = chain.next_kind()
        chain.written(kind)
        out.append(kind)
    return out


def test_a_chain_holds_at_most_max_deltas_after_its_base() -> None:
    chain = OwnerChain(ChainPolicy(max_deltas=3))
    assert kinds(chain, 9) == ["full", "delta", "delta", "delta"] * 2 + ["full"]


def test_a_restored_owner_starts_a_new_chain() -> None:
    chain = OwnerChain(ChainPolicy(max_deltas=8))
    assert kinds(chain, 3) == ["full", "delta", "delta"]
    chain.restart()
    assert kinds(chain, 2) == ["full", "delta"]


def test_a_chain_of_one_delta_alternates() -> None:
    assert kinds(OwnerChain(ChainPolicy(max_deltas=1)), 4) == [
        "full",
        "delta",
        "full",
        "delta",
    ]


def test_a_bound_below_one_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.checkpoint\.max\.chain\.length=0"):
        ChainPolicy(max_deltas=0)


def test_a_sender_of_a_hand_over_postpones_its_compaction_within_a_bound() -> None:
    chain = OwnerChain(ChainPolicy(max_deltas=2))
    assert kinds(chain, 2) == ["full", "delta"]
    chain.postpone()  # allowed up to 1 + 2 deltas
    assert kinds(chain, 3) == ["delta", "delta", "full"]
    assert kinds(chain, 1) == ["delta"]
    seen = []
    for _ in range(9):  # postponed before every snapshot: 4x the bound at most
        chain.postpone()
        seen += kinds(chain, 1)
    assert seen == ["delta"] * 7 + ["full", "delta"]
