"""``ReplayableSpout`` in native mode: what it sends when a rollback asks for it.

The spout writes the multilang protocol to an in-memory stream through pystorm's
JSON serializer; the epoch store it reports to is a recorder (its own
collaborator).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from storm_bridge import ReplayableSpout
from storm_bridge.generation_field import warmup_emit
from storm_bridge.native_agents import SpoutAgent
from storm_bridge.replayable import SpoutRuntime
from topology_api.barriers import WARMUP_STREAM
from zk.epoch_control import EpochControl
from zk.epochs import Phase


class Src(ReplayableSpout):
    outputs = ["n"]

    def next_tuple(self) -> None:
        self.emit([1], offset=1)


class Reports:
    def __init__(self) -> None:
        self.steps: list[tuple[str, str, Any]] = []

    def report(self, step: str, name: str, info: Any) -> None:
        self.steps.append((step, name, info))


def _sent(out: io.BytesIO) -> list[dict[str, Any]]:
    text = out.getvalue().decode()
    return [json.loads(m) for m in text.split("\nend\n") if m.strip()]


def _spout(*, fenced: bool) -> tuple[Src, SpoutRuntime, io.BytesIO]:
    out = io.BytesIO()
    spout = Src(input_stream=io.BytesIO(), output_stream=out)
    agent = SpoutAgent(name="src/0", bumped=False, fenced=fenced)
    runtime = SpoutRuntime(name="src/0", agent=agent, store=Reports(), topology="t")
    spout._sr3 = runtime  # noqa: SLF001 - the handshake would set it, with ZooKeeper
    return spout, runtime, out


@pytest.mark.parametrize("fenced", [True, False])
def test_a_rollback_sends_one_warmup_over_every_connection_where_tuples_are_fenced(
    fenced: bool,
) -> None:
    spout, runtime, out = _spout(fenced=fenced)
    runtime.agent.on_control(EpochControl(Phase.ROLLBACK, 4, 2))
    for _ in range(3):
        spout._sr3_native_next(runtime)  # noqa: SLF001 - pystorm's next, one step
    warmups = [m for m in _sent(out) if m.get("stream") == WARMUP_STREAM]
    # one per rollback, before the report that lets the spouts resume
    assert [m["tuple"] for m in warmups] == ([[2]] if fenced else [])
    if fenced:
        assert {k: warmups[0][k] for k in warmup_emit(2)} == warmup_emit(2)
    assert [step for step, _name, _info in runtime.store.steps] == [
        EpochControl(Phase.ROLLBACK, 4, 2).step()
    ]
    # a PAUSE sends none
    runtime.agent.on_control(EpochControl(Phase.PAUSE, 5, 2))
    spout._sr3_native_next(runtime)  # noqa: SLF001 - as above
    assert len([m for m in _sent(out) if m.get("stream") == WARMUP_STREAM]) == len(
        warmups
    )
