"""A spout whose ``next_tuple`` raises once it reaches ``n == 5``."""

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout


class Source(ReplayableSpout):
    outputs = ["n"]

    def initialize(self, conf, context):
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next == 5:
            msg = "the source went away"
            raise OSError(msg)
        if self.next < 8:
            self.emit([self.next], offset=self.next)
            self.next += 1


class Echo(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit([tup.values[0]])


class SpoutRaises(Topology):
    source = Source.spec(par=1)
    echo = Echo.spec(inputs={source: Grouping.SHUFFLE}, par=1)
