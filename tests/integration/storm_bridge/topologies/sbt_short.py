"""A bolt emitting one value on a two-field stream: its reader cannot build it."""

from sbt_components import RecordBolt, SentenceSpout
from streamparse import Bolt, Topology


class ShortBolt(Bolt):
    outputs = ["word", "n"]

    def process(self, tup):
        self.emit([tup.values[0]])  # one value short of the declared fields


class Short(Topology):
    sentence_spout = SentenceSpout.spec()
    short_bolt = ShortBolt.spec(inputs=[sentence_spout])
    record_bolt = RecordBolt.spec(inputs=[short_bolt])
