"""A spout that emits nothing for ``sbt.pause_s`` at start and again half-way.

Its classes come from a sibling module (``sbt_components``), as streamparse
projects split them.
"""

import time

from sbt_components import CountBolt
from streamparse import Grouping, Spout, Topology


class PausingSpout(Spout):
    """Emits ``sbt.sentences`` reliably, pausing before the first and the middle one."""

    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = list(storm_conf.get("sbt.sentences", []))
        self.pause_s = float(storm_conf.get("sbt.pause_s", 0.5))
        self.position = 0
        self.resume_at = time.monotonic() + self.pause_s

    def next_tuple(self):
        if time.monotonic() < self.resume_at or self.position >= len(self.words):
            return
        self.emit([self.words[self.position]], tup_id=str(self.position))
        self.position += 1
        if self.position == len(self.words) // 2:
            self.resume_at = time.monotonic() + self.pause_s


class Paused(Topology):
    pausing_spout = PausingSpout.spec()
    count_bolt = CountBolt.spec(inputs={pausing_spout: Grouping.fields("word")}, par=2)
