"""Owner ids are built and parsed in one place."""

from __future__ import annotations

import pytest

from backend.owners import (
    OwnerId,
    component_owners,
    owner_name,
    owner_topology,
    topology_owners,
    writer_name,
)


def test_an_owner_id_round_trips() -> None:
    assert owner_name("wc", "count", 2) == "wc/count/2"
    assert OwnerId.parse("wc/count/2") == OwnerId("wc", "count", 2)


@pytest.mark.parametrize("bad", ["wc/count", "wc/count/x", "/count/1", "wc//1", ""])
def test_a_malformed_owner_id_is_refused_with_its_form(bad: str) -> None:
    with pytest.raises(ValueError, match="<topology>/<component>/<task index>"):
        OwnerId.parse(bad)


def test_owners_of_a_component_come_in_task_order() -> None:
    names = ["wc/count/10", "wc/count/2", "wc/split/0", "other/count/1", "lines/0"]
    assert component_owners(names, "wc", "count") == ["wc/count/2", "wc/count/10"]
    assert topology_owners(names, "wc") == ["wc/count/2", "wc/count/10", "wc/split/0"]


def test_a_named_writer_of_a_topology_is_its_topology_but_no_task() -> None:
    # the Spark driver's pending Kafka outputs: pinned with the topology's
    # savepoints, never counted as a stateful task
    assert writer_name("wc", "results", "spark") == "wc/results/spark"
    assert owner_topology(writer_name("wc", "results", "spark")) == "wc"
    assert owner_topology("wc/count/2") == "wc"
    assert owner_topology("synthetic") is None
    assert topology_owners(["wc/results/spark", "wc/count/0"], "wc") == ["wc/count/0"]
