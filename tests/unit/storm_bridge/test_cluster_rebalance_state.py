"""A rebalance's lifecycle refuses illegal moves; its report entry is relative."""

from __future__ import annotations

import pytest

from storm_bridge.cluster.rebalance_state import Phase, Rebalance
from storm_bridge.errors import ClusterStateError


def test_a_rebalance_goes_armed_holding_switching_done() -> None:
    rebalance = Rebalance("r1", {"count": (2, 4)}, requested_at=10.0)
    for phase in (Phase.HOLDING, Phase.ARMED, Phase.HOLDING, Phase.SWITCHING):
        rebalance.move(phase)
    rebalance.move(Phase.DONE)
    assert rebalance.phase is Phase.DONE


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ((), Phase.SWITCHING),  # no switch without a held epoch
        ((Phase.HOLDING, Phase.SWITCHING), Phase.ARMED),  # no undo after the switch
        ((Phase.DONE,), Phase.ARMED),
    ],
)
def test_illegal_moves_are_refused(path: tuple[Phase, ...], illegal: Phase) -> None:
    rebalance = Rebalance("r1", {"count": (2, 4)}, requested_at=0.0)
    for phase in path:
        rebalance.move(phase)
    with pytest.raises(ClusterStateError, match="r1: illegal move"):
        rebalance.move(illegal)


def test_a_key_groups_rebalance_starts_tasks_then_moves_batches() -> None:
    rebalance = Rebalance("r1", {"count": (2, 4)}, requested_at=0.0, how="key-groups")
    path = (Phase.SWITCHING, Phase.ARMED, Phase.HOLDING, Phase.ARMED, Phase.HOLDING)
    for phase in (*path, Phase.ARMED, Phase.DONE):
        rebalance.move(phase)
    entry = rebalance.to_dict()
    assert entry["how"] == "key-groups"
    assert {"batches", "key_groups_moved", "kept_processed"} <= set(entry)


def test_a_task_restart_rebalance_reports_no_key_group_fields() -> None:
    entry = Rebalance("r1", {"count": (2, 4)}, requested_at=0.0).to_dict()
    assert "how" not in entry
    assert "batches" not in entry


def test_the_report_entry_has_times_since_the_run_started() -> None:
    rebalance = Rebalance("r1", {"count": (2, 4)}, requested_at=12.0)
    rebalance.switched_at, rebalance.ended_at = 12.5, 13.25
    rebalance.pauses = {3: 0.5, 4: 1.25}
    entry = rebalance.to_dict(started=10.0)
    assert entry["targets"] == {"count": {"from": 2, "to": 4}}
    assert (entry["start_s"], entry["switch_s"], entry["end_s"]) == (2.0, 2.5, 3.25)
    assert entry["longest_key_pause_s"] == 1.25
