"""Replayable numbers -> a hand-written buffering bolt -> a stateful total.

The buffering bolt has ``auto_ack = False``: it acks its inputs when a tick
flushes them, and never acks the ticks themselves, as many streamparse bolts
do (on Storm an unacked tick is harmless: it belongs to no tuple tree).
"""

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = 5


class Numbers(ReplayableSpout):
    outputs = ["key", "n"]

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("sbt.count", 1000))
        self.next_n = 0

    def seek(self, offset):
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < self.count:
            n = self.next_n
            self.next_n += 1
            self.emit([f"k{n % KEYS}", n], offset=n)


class Buffer(Bolt):
    outputs = ["key", "sum", "count"]
    auto_ack = False

    def initialize(self, storm_conf, context):
        self.held = {}

    def process(self, tup):
        self.held.setdefault(tup.values[0], []).append(tup)

    def process_tick(self, tup):
        held, self.held = self.held, {}
        for key, tups in sorted(held.items()):
            total = sum(t.values[1] for t in tups)
            self.emit([key, total, len(tups)], anchors=tups)
            for t in tups:
                self.ack(t)


class Total(StatefulBolt):
    outputs = ["key", "sum", "count"]

    def process(self, tup):
        key, total, count = tup.values
        self.state["sum"] = self.state.get("sum", 0) + total
        self.state["count"] = self.state.get("count", 0) + count
        self.emit([key, self.state["sum"], self.state["count"]])


class TickFlush(Topology):
    numbers = Numbers.spec()
    buffer = Buffer.spec(
        inputs={numbers: Grouping.fields("key")},
        par=2,
        config={"topology.tick.tuple.freq.secs": 1},
    )
    total = Total.spec(inputs={buffer: Grouping.fields("key")}, par=2)
