"""Fixtures for the Storm bridge unit tests: topology files written on the fly."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

COMPONENTS = """
from streamparse import Bolt, Spout, Stream


class WordSpout(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass


class CountBolt(Bolt):
    outputs = [Stream(["word", "count"]), Stream(["word"], name="direct", direct=True)]
    sr3_stateful = True

    def process(self, tup):
        pass
"""

DEFAULT_TOPOLOGY = """
from streamparse import Bolt, Grouping, Topology
from {helpers} import CountBolt, WordSpout

class SinkBolt(Bolt):
    outputs = []

    def process(self, tup):
        pass

class WordCount(Topology):
    word_spout = WordSpout.spec(par=2)
    count_bolt = CountBolt.spec(inputs={{word_spout: Grouping.fields("word")}}, par=3)
    sink = SinkBolt.spec(
        inputs={{count_bolt["direct"]: Grouping.DIRECT, count_bolt: Grouping.ALL}}
    )
"""


@pytest.fixture
def write_topology(tmp_path: Path) -> Callable[..., Path]:
    """Return ``write(body=DEFAULT_TOPOLOGY)``: a topology file plus its helper module.

    Module names are unique per call: topology files are imported under their stem.
    """

    def write(body: str = DEFAULT_TOPOLOGY) -> Path:
        suffix = uuid.uuid4().hex[:8]
        helpers = f"helpers_{suffix}"
        (tmp_path / f"{helpers}.py").write_text(COMPONENTS)
        path = tmp_path / f"topo_{suffix}.py"
        path.write_text(textwrap.dedent(body.format(helpers=helpers)))
        return path

    return write
