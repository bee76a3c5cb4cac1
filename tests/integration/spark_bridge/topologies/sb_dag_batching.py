"""A streamparse ``BatchingBolt`` (flushed by tick tuples) before a stateful bolt.

``batch`` groups the numbers by ``k`` and emits ``[k, size, sum]`` per batch;
``totals`` adds up the sums and sizes per ``k``. With ``dag.poison`` set, a
batch holding that number raises.
"""

from sb_dag_parts import Grouping, Numbers, StatefulBolt, Topology
from streamparse import BatchingBolt


class Batch(BatchingBolt):
    outputs = ["k", "size", "sum"]
    ticks_between_batches = 1

    def initialize(self, conf, context):
        self.poison = conf.get("dag.poison")

    def group_key(self, tup):
        return tup.values[1]

    def process_batch(self, key, tups):
        if any(t.values[0] == self.poison for t in tups):
            msg = f"batch {key} holds {self.poison}"
            raise ValueError(msg)
        self.emit([key, len(tups), sum(t.values[0] for t in tups)])


class Totals(StatefulBolt):
    outputs = ["k", "size", "sum"]

    def process(self, tup):
        k, size, total = tup.values
        self.state["size"] = self.state.get("size", 0) + size
        self.state["sum"] = self.state.get("sum", 0) + total
        self.emit([k, self.state["size"], self.state["sum"]])


class Batching(Topology):
    config = {"topology.tick.tuple.freq.secs": 1}
    numbers = Numbers.spec(par=2)
    batch = Batch.spec(inputs={numbers: Grouping.SHUFFLE}, par=2)
    totals = Totals.spec(inputs={batch: Grouping.fields("k")}, par=2)
