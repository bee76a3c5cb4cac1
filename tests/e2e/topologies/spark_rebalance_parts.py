"""A gated line spout for rebalancing a word count on the Spark engine.

The spout emits lines up to its budget: the number in the file
``<rebal.gates>/lines`` (0 while it is missing). At its budget it emits
nothing, so Spark plans no micro-batch until the test raises the budget; the
test thereby knows which batch each line lands in. The word count's ``Split``
and ``Count`` are those of the Storm engine's rebalance test.
"""

from __future__ import annotations

from pathlib import Path

from rebalance_parts import Count, Split, corpus

from storm_bridge import ReplayableSpout

__all__ = ["Count", "GatedLines", "Split"]


class GatedLines(ReplayableSpout):
    outputs = ["line"]

    def initialize(self, conf, context):
        self.lines = corpus(int(conf["rebal.lines"]))
        self.gate = Path(conf["rebal.gates"]) / "lines"
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        budget = (
            int(self.gate.read_text(encoding="utf-8") or 0) if self.gate.exists() else 0
        )
        if self.next >= min(budget, len(self.lines)):
            return
        n = self.next
        self.next += 1
        self.emit([self.lines[n]], offset=n)
