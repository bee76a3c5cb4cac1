"""The pystorm run loop our components extend, driven through its public ``run()``.

pystorm has no public hook for the handshake step or the loop step: ``run()``
(which subclasses must not override) calls ``_setup_component`` once and then
``_run`` forever, and pystorm's own ``Bolt``, ``Spout`` and ``BatchingBolt``
extend it by overriding those two. ``StatefulBolt`` and ``ReplayableSpout`` do
the same (docs/architecture.md, "pystorm's private steps"). These tests run a
stateful bolt and a replayable spout from the multilang handshake to Storm
going away, as a worker would, so a pystorm release that renamed or reordered
those steps fails here instead of on a cluster.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.components import BARRIER_COMMAND, BARRIER_STREAM
from tests.unit.storm_bridge.test_components import (
    JSON,
    Count,
    Numbers,
    context,
    emits,
    messages,
    tuple_msg,
)


class ExitError(Exception):
    """Raised in place of pystorm's ``_exit`` (it may ``os._exit`` the test)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def run_until_storm_leaves(component: Any, out: io.BytesIO, pid_dir: Path) -> list[Any]:
    """Run ``component.run()`` until its input ends; return what it wrote to ``out``."""

    def leave(code: int) -> None:
        raise ExitError(code)

    component._exit = leave
    with pytest.raises(ExitError) as exit_info:
        component.run()
    # end of input is Storm going away: pystorm's code 2, not an error exit
    assert exit_info.value.code == 2
    assert (pid_dir / str(os.getpid())).exists()
    return messages(out)


def handshake(component: str, grouping: dict[str, Any] | None, pid_dir: Path) -> bytes:
    return JSON.encode(
        {
            "conf": {"topology.name": "t"},
            "context": context(component, grouping),
            "pidDir": str(pid_dir),
        }
    )


def test_pystorm_run_drives_a_stateful_bolt_from_handshake_to_exit(
    tmp_path: Path,
) -> None:
    fields = {"type": "FIELDS", "fields": ["word"]}
    inputs = [
        handshake("count", fields, tmp_path),
        tuple_msg(["a", 1], tid="1"),
        tuple_msg(["b", 1], tid="2"),
        tuple_msg([3, {}], tid="b", stream=BARRIER_STREAM),
        tuple_msg(["a", 2], tid="3"),
    ]
    out = io.BytesIO()
    bolt = Count(input_stream=io.BytesIO(b"".join(inputs)), output_stream=out)
    msgs = run_until_storm_leaves(bolt, out, tmp_path)
    assert msgs[0] == {"pid": os.getpid()}
    assert emits(msgs) == [["a", 1], ["b", 1], ["a", 2]]
    assert emits(msgs, BARRIER_STREAM) == [[3, {"owner": "t/count/1"}]]
    assert [m["id"] for m in msgs if m.get("command") == "ack"] == ["1", "2", "3"]
    assert dict(bolt.keyed_state.items()) == {("a",): {"n": 2}, ("b",): {"n": 1}}


def test_pystorm_run_drives_a_replayable_spout_from_handshake_to_exit(
    tmp_path: Path,
) -> None:
    commands = [
        handshake("numbers", None, tmp_path),
        JSON.encode({"command": "next", "id": ""}),
        JSON.encode({"command": BARRIER_COMMAND, "id": 4}),
        JSON.encode({"command": "next", "id": ""}),
    ]
    out = io.BytesIO()
    spout = Numbers(input_stream=io.BytesIO(b"".join(commands)), output_stream=out)
    msgs = run_until_storm_leaves(spout, out, tmp_path)
    # the replayable spout sought its start (nothing committed) before any next
    assert spout.sought == [None]
    assert emits(msgs) == [[0], [1]]
    assert emits(msgs, BARRIER_STREAM) == [[4, {"offset": 0, "spout": "numbers/1"}]]
    assert sum(m == {"command": "sync"} for m in msgs) == len(commands) - 1
