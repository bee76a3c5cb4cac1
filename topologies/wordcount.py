"""Exactly-once word count: a replayable line spout, a splitter, a stateful counter.

The corpus is generated deterministically from ``wordcount.seed`` (default 7):
``wordcount.lines`` lines (default 2000) of ``wordcount.words.per.line`` words
(default 8) drawn from a fixed vocabulary. Spout task ``i`` of ``n`` emits the
lines whose number is ``i`` modulo ``n``, with the line number as its offset, so
the source is finite and replayable. Run it with::

    sr3 run topologies/wordcount.py --until-idle
    sr3 state dump --topology wordcount --component count
"""

from __future__ import annotations

import random

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

VOCABULARY = (
    "apple banana cherry delta echo falcon garden harbor island jungle kettle "
    "lemon meadow nectar orbit pepper quartz river saddle timber umber velvet "
    "willow xenon yonder zephyr amber breeze cobalt dune ember fjord glacier "
    "hollow ivory jasper kelp lagoon marble nimbus"
).split()


def corpus(lines: int, words_per_line: int, seed: int) -> list[str]:
    """Return the deterministic corpus: ``lines`` lines of random vocabulary."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    return [
        " ".join(rng.choice(VOCABULARY) for _ in range(words_per_line))
        for _ in range(lines)
    ]


def corpus_from_conf(conf):
    """Return the corpus the ``wordcount.*`` conf keys describe."""
    return corpus(
        int(conf.get("wordcount.lines", 2000)),
        int(conf.get("wordcount.words.per.line", 8)),
        int(conf.get("wordcount.seed", 7)),
    )


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
        self.lines = corpus_from_conf(stormconf)
        self.next_line = self.index

    def seek(self, offset):
        self.next_line = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_line >= len(self.lines):
            self.end_of_input()  # --until-idle ends without a quiet period
            return
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


class WordCount(Topology):
    lines = Lines.spec(par=2)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(
        inputs={split: Grouping.fields("word")},
        par=3,
        config={"sr3.recovery.mechanism": "tree"},
    )
