"""Word count at a fixed input rate, each output's end-to-end latency recorded.

The spout is a source whose line ``n`` arrives at ``t0 + n / straggler.rate``
(lines per second, default 250), ``straggler.lines`` lines in all (default
5000) of 8 words; ``t0`` is the first spout start's wall-clock time, kept in
``straggler.out/t0`` so a restarted spout keeps the schedule. Each word carries
its line's arrival time through ``split`` and the stateful ``count`` to a
``sink`` task that appends ``line,index,latency_s,at`` to a file of its own
in ``straggler.out`` for every output it receives (a replay shows up twice:
readers keep the first). ``bench/stragglers.py`` runs it::

    sr3 run bench/topologies/straggler_wc.py --until-idle -o straggler.out=/tmp/o
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

VOCABULARY = (
    "apple banana cherry delta echo falcon garden harbor island jungle kettle "
    "lemon meadow nectar orbit pepper quartz river saddle timber umber velvet"
).split()


def line_text(n: int) -> str:
    """Return line ``n``: 8 words drawn from a generator seeded with ``n``."""
    rng = random.Random(n)  # noqa: S311 (test data, not secrets)
    return " ".join(rng.choice(VOCABULARY) for _ in range(8))


class Lines(ReplayableSpout):
    outputs = ["line", "n", "due"]

    def initialize(self, stormconf, context):
        self.rate = float(stormconf.get("straggler.rate", 250))
        self.lines = int(stormconf.get("straggler.lines", 5000))
        out = Path(stormconf["straggler.out"])
        stamp = out / "t0"
        if not stamp.exists():
            stamp.write_text(repr(time.time()))
        self.t0 = float(stamp.read_text())
        self.next_line = 0

    def seek(self, offset):
        self.next_line = 0 if offset is None else offset + 1

    def next_tuple(self):
        now = time.time()
        while self.next_line < self.lines:
            n = self.next_line
            due = self.t0 + n / self.rate
            if due > now:
                return
            self.next_line += 1
            self.emit([line_text(n), n, due], offset=n)


class Split(Bolt):
    outputs = ["word", "n", "index", "due"]

    def process(self, tup):
        text, n, due = tup.values
        for index, word in enumerate(text.split()):
            self.emit([word, n, index, due])


class Count(StatefulBolt):
    outputs = ["word", "count", "n", "index", "due"]

    def process(self, tup):
        word, n, index, due = tup.values
        count = self.state.get("n", 0) + 1
        self.state["n"] = count
        self.emit([word, count, n, index, due])


class Sink(Bolt):
    outputs = []

    def initialize(self, stormconf, context):
        out = Path(stormconf["straggler.out"])
        name = f"sink-{os.getpid()}.csv"
        self.file = (out / name).open("a", buffering=1, encoding="utf-8")

    def process(self, tup):
        _word, _count, n, index, due = tup.values
        now = time.time()
        self.file.write(f"{n},{index},{now - due:.6f},{now:.6f}\n")


class StragglerWordCount(Topology):
    lines = Lines.spec(par=1)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=3)
    sink = Sink.spec(inputs={count: Grouping.SHUFFLE}, par=1)
