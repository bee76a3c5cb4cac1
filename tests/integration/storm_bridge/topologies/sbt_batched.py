"""Replayable numbers -> a BatchingBolt summing per key each tick -> a stateful total.

The batching bolt acks its inputs only when it flushes a batch, one tick later,
so checkpoint barriers have to wait for it.
"""

from streamparse import BatchingBolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = 9


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


class SumBatch(BatchingBolt):
    outputs = ["key", "sum", "count"]
    ticks_between_batches = 1

    def group_key(self, tup):
        return tup.values[0]

    def process_batch(self, key, tups):
        self.emit([key, sum(t.values[1] for t in tups), len(tups)])


class Total(StatefulBolt):
    outputs = ["key", "sum", "count"]

    def process(self, tup):
        key, total, count = tup.values
        self.state["sum"] = self.state.get("sum", 0) + total
        self.state["count"] = self.state.get("count", 0) + count
        self.emit([key, self.state["sum"], self.state["count"]])


class Batched(Topology):
    numbers = Numbers.spec()
    sum_batch = SumBatch.spec(
        inputs={numbers: Grouping.fields("key")},
        par=2,
        config={"topology.tick.tuple.freq.secs": 1},
    )
    total = Total.spec(inputs={sum_batch: Grouping.fields("key")}, par=2)
