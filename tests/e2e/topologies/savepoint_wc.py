"""A word count whose logic a conf switch changes, for savepoint tests.

A replayable spout emits the first ``spwc.limit`` words of a deterministic
sequence, one per tuple (offset = the word's index), pausing ``spwc.pause.s``
after each; ``count`` adds ``spwc.factor`` (default 1) per word to the word's
state. "Changing the code" is ``-o spwc.factor=10``: a run from a savepoint
with it must hold the savepoint's counts plus ten times the counts of the words
after it. The counter's parallelism is picked per environment (``-e p2``).
"""

from __future__ import annotations

import random
import time
from collections import Counter

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

VOCABULARY = [f"w{i:02d}" for i in range(25)]
PAR = {"p1": 1, "p2": 2, "p3": 3}


def words(count: int, seed: int = 19) -> list[str]:
    """Return the first ``count`` words of the deterministic sequence."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    return [rng.choice(VOCABULARY) for _ in range(count)]


def counts(start: int, stop: int, factor: int = 1) -> Counter[str]:
    """Return ``factor`` times the counts of words ``start`` to ``stop - 1``."""
    seen = Counter(words(stop)[start:])
    return Counter({word: n * factor for word, n in seen.items()})


class Words(ReplayableSpout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.words = words(int(stormconf.get("spwc.limit", 200)))
        self.pause_s = float(stormconf.get("spwc.pause.s", 0))
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next >= len(self.words):
            self.end_of_input()
            return
        n = self.next
        self.next += 1
        self.emit([self.words[n]], offset=n)
        if self.pause_s:
            time.sleep(self.pause_s)  # throttle: a run spans many epochs


class Count(StatefulBolt):
    outputs = []

    def initialize(self, conf, ctx):
        self.factor = int(conf.get("spwc.factor", 1))

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + self.factor


class SavepointWordCount(Topology):
    words = Words.spec(par=1)
    count = Count.spec(inputs={words: Grouping.fields("word")}, par=PAR)
