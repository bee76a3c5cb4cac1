"""Components of the join/merge test topology (beside its file).

Two replayable spouts (``left`` with two tasks, ``right`` with one) feed a
stateless ``tag`` bolt that merges them (shuffle from three spout tasks), then
a stateful symmetric hash ``join`` on the key, whose input is the merge of
both ``tag`` tasks' channels. The join emits every (key, left, right) pair
once; which pair comes out when depends on the arrival order, the set of
pairs does not. The sink appends what it gets to one file per task.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from streamparse import Bolt

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = [f"k{i:02d}" for i in range(12)]


def side(name: str, rows: int, seed: int = 5) -> list[tuple[str, int]]:
    """The rows of one side: (key, value) with values unique per side."""
    rng = random.Random(f"{seed}-{name}")
    return [(rng.choice(KEYS), n) for n in range(rows)]


class _Side(ReplayableSpout):
    outputs = ["key", "value"]
    name = ""

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.rows = side(self.name, int(stormconf["join.rows"]))
        self.next_row = self.index
        self.pause_s = float(stormconf.get("join.pause.s", 0))

    def seek(self, offset):
        self.next_row = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_row >= len(self.rows):
            self.end_of_input()
        else:
            if self.pause_s:
                time.sleep(self.pause_s)
            n = self.next_row
            self.next_row += self.step
            key, value = self.rows[n]
            self.emit([key, value], offset=n)


class Left(_Side):
    name = "left"


class Right(_Side):
    name = "right"


class Tag(Bolt):
    """Merges both sides, tagging each row with its side."""

    outputs = ["key", "side", "value"]

    def process(self, tup):
        key, value = tup.values
        self.emit([key, "L" if tup.component == "left" else "R", value])


class Join(StatefulBolt):
    """Symmetric hash join: each new row meets the other side's rows so far."""

    outputs = ["key", "left", "right"]

    def process(self, tup):
        key, tag, value = tup.values
        mine, other = ("L", "R") if tag == "L" else ("R", "L")
        seen = list(self.state.get(mine, []))
        seen.append(value)
        self.state[mine] = seen
        for match in self.state.get(other, []):
            left, right = (value, match) if tag == "L" else (match, value)
            self.emit([key, left, right])


class Sink(Bolt):
    """Appends every tuple it receives to a file of its task."""

    outputs = []

    def initialize(self, conf, ctx):
        path = Path(conf["join.out"]) / f"sink-{ctx['taskid']}.tsv"
        self.out = path.open("a", encoding="utf-8")

    def process(self, tup):
        self.out.write("\t".join(str(v) for v in tup.values) + "\n")
        self.out.flush()
