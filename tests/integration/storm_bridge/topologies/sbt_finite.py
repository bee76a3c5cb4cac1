"""A spout over ``sbt.sentences`` that says when its input ended (``end_of_input``).

It emits reliably, one word a ``next``; the count bolt downstream is slow
(``sbt.bolt_sleep_s``), so tuples are still in flight when the input ends.
"""

import time

from sbt_components import CountBolt
from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout


class FiniteSpout(ReplayableSpout):
    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = list(storm_conf.get("sbt.sentences", []))
        self.position = 0

    def seek(self, offset):
        self.position = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.position >= len(self.words):
            self.end_of_input()
            return
        word = self.words[self.position]
        self.emit([word], offset=self.position, tup_id=str(self.position))
        self.position += 1


class SlowCountBolt(CountBolt):
    def initialize(self, storm_conf, context):
        super().initialize(storm_conf, context)
        self.sleep_s = float(storm_conf.get("sbt.bolt_sleep_s", 0.0))

    def process(self, tup):
        time.sleep(self.sleep_s)  # slow on purpose: tuples in flight at the end
        super().process(tup)


class Finite(Topology):
    finite_spout = FiniteSpout.spec()
    count_bolt = SlowCountBolt.spec(
        inputs={finite_spout: Grouping.fields("word")}, par=2
    )
