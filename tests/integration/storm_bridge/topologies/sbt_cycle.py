"""A cycle: countdown -> relay -> countdown until zero, then the counter.

Storm allows cycles; a word goes round ``sbt.rounds`` times. The spout pauses
half-way so checkpoint barriers pass while words are on the loop.
"""

import time

from sbt_components import CountBolt
from streamparse import Bolt, Grouping, Spout, Stream, Topology
from streamparse.thrift import GlobalStreamId


class HalvedSpout(Spout):
    """Emits ``sbt.sentences`` reliably, pausing ``sbt.pause_s`` half-way."""

    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = list(storm_conf.get("sbt.sentences", []))
        self.pause_s = float(storm_conf.get("sbt.pause_s", 0.5))
        self.position = 0

    def next_tuple(self):
        if self.position < len(self.words):
            if self.position == len(self.words) // 2:
                time.sleep(self.pause_s)  # lets epochs open mid-stream
            self.emit([self.words[self.position]], tup_id=str(self.position))
            self.position += 1


class Countdown(Bolt):
    outputs = [Stream(["word", "n"], name="default"), Stream(["word"], name="done")]

    def initialize(self, storm_conf, context):
        self.rounds = int(storm_conf.get("sbt.rounds", 3))

    def process(self, tup):
        word = tup.values[0]
        n = tup.values[1] if tup.component == "relay" else self.rounds
        if n > 0:
            self.emit([word, n - 1])
        else:
            self.emit([word], stream="done")


class Relay(Bolt):
    outputs = ["word", "n"]

    def process(self, tup):
        self.emit(list(tup.values))


class Cycle(Topology):
    halved_spout = HalvedSpout.spec()
    countdown = Countdown.spec(
        inputs={
            halved_spout: Grouping.SHUFFLE,
            GlobalStreamId(componentId="relay", streamId="default"): Grouping.SHUFFLE,
        },
        par=2,
    )
    relay = Relay.spec(name="relay", inputs={countdown: Grouping.SHUFFLE})
    count_bolt = CountBolt.spec(inputs={countdown["done"]: Grouping.fields("word")})
