"""The engine-neutral component contract: markers and the state key override."""

from __future__ import annotations

from typing import Any

import pytest

from topology_api.contract import (
    ReplayableComponent,
    StatefulComponent,
    fixed_parallelism,
    is_replayable_class,
    is_stateful_class,
    overrides_state_key,
)


class ByGrouping(StatefulComponent):
    def grouping_key(self, tup: Any) -> tuple[Any, ...]:
        return (tup[0],)


class ByPair(ByGrouping):
    def state_key(self, tup: Any) -> tuple[Any, ...]:
        return (tup[0], tup[1])


class MarkedOnly:
    sr3_stateful = True


def test_the_state_key_defaults_to_the_grouping_key() -> None:
    assert ByGrouping().state_key(("alice", "home")) == ("alice",)
    assert not overrides_state_key(ByGrouping)


def test_an_overridden_state_key_is_seen_by_the_engines() -> None:
    assert ByPair().state_key(("alice", "home")) == ("alice", "home")
    assert overrides_state_key(ByPair)


def test_a_class_marked_stateful_without_the_contract_keys_by_its_grouping() -> None:
    assert is_stateful_class(MarkedOnly)
    assert not overrides_state_key(MarkedOnly)
    assert not is_replayable_class(MarkedOnly)


def test_the_contract_alone_names_the_class_to_subclass() -> None:
    with pytest.raises(NotImplementedError, match=r"storm_bridge\.StatefulBolt"):
        StatefulComponent().state_key(("alice",))


def test_a_replayable_component_is_stateful_and_must_implement_seek() -> None:
    assert is_replayable_class(ReplayableComponent)
    assert is_stateful_class(ReplayableComponent)
    with pytest.raises(NotImplementedError):
        ReplayableComponent().seek(None)


def test_a_kafka_sink_keeps_its_task_count_and_says_why() -> None:
    from storm_bridge.kafka import KafkaSink  # noqa: PLC0415 (the engine's class)

    reason = fixed_parallelism(KafkaSink)
    assert reason is not None
    assert "transactional ids per task" in reason
    assert fixed_parallelism(ByGrouping) is None
    assert fixed_parallelism(MarkedOnly) is None
