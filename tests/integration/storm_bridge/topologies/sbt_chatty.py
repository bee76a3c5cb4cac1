"""A paced spout feeding a bolt that logs ``sbt.logs_per_tuple`` lines per tuple."""

import time

from streamparse import Bolt, Grouping, Spout, Topology


class PacedSpout(Spout):
    """Emits ``sbt.count`` numbers, one every ``sbt.pace_s`` seconds."""

    outputs = ["n"]

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("sbt.count", 8))
        self.pace_s = float(storm_conf.get("sbt.pace_s", 0.5))
        self.n = 0
        self.due = time.monotonic()

    def next_tuple(self):
        if self.n < self.count and time.monotonic() >= self.due:
            self.emit([self.n], tup_id=self.n)
            self.n += 1
            self.due += self.pace_s


class ChattyBolt(Bolt):
    outputs = ["n"]

    def initialize(self, storm_conf, context):
        self.lines = int(storm_conf.get("sbt.logs_per_tuple", 3000))

    def process(self, tup):
        for i in range(self.lines):
            self.log(f"line {i} about {tup.values[0]}")
        self.emit(tup.values)


class Chatty(Topology):
    paced_spout = PacedSpout.spec()
    chatty_bolt = ChattyBolt.spec(inputs={paced_spout: Grouping.SHUFFLE}, par=2)
