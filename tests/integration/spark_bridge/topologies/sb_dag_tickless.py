"""A streamparse ``TicklessBatchingBolt``: flushed by a timer thread, not ticks."""

from sb_dag_parts import Grouping, Numbers, Topology
from streamparse import TicklessBatchingBolt


class Timed(TicklessBatchingBolt):
    outputs = ["k", "size"]

    def group_key(self, tup):
        return tup.values[1]

    def process_batch(self, key, tups):
        self.emit([key, len(tups)])


class Tickless(Topology):
    numbers = Numbers.spec(par=1)
    timed = Timed.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
