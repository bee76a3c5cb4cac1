"""Storm rebalance requests: executors per component from Nimbus, Storm's limit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from storm_bridge.sparse.rebalance import (
    ComponentLayout,
    StormRebalanceError,
    check_storm_request,
    layout,
)


def _executor(component: str, start: int, end: int, up: int = 9) -> SimpleNamespace:
    info = SimpleNamespace(task_start=start, task_end=end)
    return SimpleNamespace(component_id=component, executor_info=info, uptime_secs=up)


def test_layout_counts_executors_and_tasks_of_user_components_only() -> None:
    info = SimpleNamespace(
        executors=[
            _executor("count", 1, 2),  # one executor running two tasks
            _executor("count", 3, 4, up=30),
            _executor("lines", 5, 5),
            _executor("__acker", 6, 6),
            _executor("__system", -1, -1),
        ]
    )
    assert layout(info) == {
        "count": ComponentLayout(executors=2, tasks=4, uptimes_s=(9, 30)),
        "lines": ComponentLayout(executors=1, tasks=1, uptimes_s=(9,)),
    }


def test_more_executors_than_tasks_is_refused_naming_topology_tasks() -> None:
    components = {"count": ComponentLayout(2, 4)}
    check_storm_request("wc", components, {"count": 4})
    with pytest.raises(StormRebalanceError, match=r"topology\.tasks.*count=4"):
        check_storm_request("wc", components, {"count": 5})


def test_an_unknown_component_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(StormRebalanceError, match=r"no component 'cnt'.*count"):
        check_storm_request("wc", {"count": ComponentLayout(2, 4)}, {"cnt": 2})
