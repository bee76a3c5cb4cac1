"""Components of the exactly-once word count test topology (beside its file)."""

from __future__ import annotations

import random
import time
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
        # a pause per line stretches the stream (0: as fast as it goes)
        self.pause_s = float(stormconf.get("exact.pause.s", 0))

    def seek(self, offset):
        self.next_line = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_line >= len(self.lines):
            self.end_of_input()
        else:
            if self.pause_s:
                time.sleep(self.pause_s)
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

    def initialize(self, conf, ctx):
        # with exact.inits set, each start appends its wall-clock span to a
        # file of the task; a restart first pauses exact.restart.pause.s
        inits = conf.get("exact.inits")
        if inits:
            path = Path(inits) / f"count-{ctx['taskid']}.txt"
            pause_s = float(conf.get("exact.restart.pause.s", 0))
            start = time.time()
            if path.exists():
                time.sleep(pause_s)
            with path.open("a", encoding="utf-8") as out:
                out.write(f"{start}\t{time.time()}\n")
        # with exact.processed set, each processed tuple appends its wall-clock
        # time and word to a file of the task (a dropped replay is not processed)
        self.processed = None
        processed = conf.get("exact.processed")
        if processed:
            path = Path(processed) / f"count-{ctx['taskid']}.tsv"
            self.processed = path.open("a", encoding="utf-8")

    def process(self, tup):
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])
        if self.processed is not None:
            self.processed.write(f"{time.time()}\t{tup.values[0]}\n")
            self.processed.flush()


class Sink(Bolt):
    """Appends every (word, count) it receives to a file of its task."""

    outputs = []

    def initialize(self, conf, ctx):
        path = Path(conf["exact.out"]) / f"sink-{ctx['taskid']}.tsv"
        self.out = path.open("a", encoding="utf-8")
        self.progress = None
        inits = conf.get("exact.inits")
        if inits:
            # when each count task's output arrived (wall clock, source task)
            progress = Path(inits) / f"progress-{ctx['taskid']}.tsv"
            self.progress = progress.open("a", encoding="utf-8")

    def process(self, tup):
        self.out.write(f"{tup.values[0]}\t{tup.values[1]}\n")
        self.out.flush()
        if self.progress is not None:
            self.progress.write(f"{time.time()}\t{tup.task}\n")
            self.progress.flush()
