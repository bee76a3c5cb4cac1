"""Components of the exactly-once word count test topology (beside its file)."""

from __future__ import annotations

import random
from pathlib import Path

from streamparse import Bolt

from storm_bridge import ReplayableSpout, StatefulBolt

VOCABULARY = [f"w{i:02d}" for i in range(30)]


def corpus(lines: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(6)) for _ in range(lines)]


class Lines(ReplayableSpout):
    outputs = ["line"]

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.lines = corpus(int(stormconf["exact.lines"]))
        self.next_line = self.index

    def seek(self, offset):
        self.next_line = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_line < len(self.lines):
            n = self.next_line
            self.next_line += self.step
            self.emit([self.lines[n]], offset=n)


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def process(self, tup):
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])


class Sink(Bolt):
    """Appends every (word, count) it receives to a file of its task."""

    outputs = []

    def initialize(self, conf, ctx):
        path = Path(conf["exact.out"]) / f"sink-{ctx['taskid']}.tsv"
        self.out = path.open("a", encoding="utf-8")

    def process(self, tup):
        self.out.write(f"{tup.values[0]}\t{tup.values[1]}\n")
        self.out.flush()
