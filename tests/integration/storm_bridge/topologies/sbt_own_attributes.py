"""A spout and a stateful bolt whose own attributes bear names SR3 once used.

Until SR3 kept a task's state in one handle (``self._sr3``), these names were
SR3's own attributes on the user's instance: setting them in ``initialize``
silently turned snapshots off (``_sr3_ring``), renamed the owner in barriers
(``_sr3_owner``) and skipped the spout's seek after a restart (``_sr3_sought``).
"""

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = 7


class Numbers(ReplayableSpout):
    outputs = ["key", "n"]

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("sbt.count", 1000))
        self.next_n = 0
        # the user's own bookkeeping, under names SR3 once used
        self._sr3_sought = True
        self._sr3_name = "mine"
        self._sr3_start_offset = 0

    def seek(self, offset):
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < self.count:
            n = self.next_n
            self.next_n += 1
            self.emit([f"k{n % KEYS}", n], offset=n)


class Total(StatefulBolt):
    outputs = ["key", "sum", "count"]

    def initialize(self, storm_conf, context):
        self._sr3_owner = "mine"
        self._sr3_ring = None
        self._sr3_metrics = []
        self._sr3_progress = 0

    def process(self, tup):
        key, n = tup.values
        self._sr3_progress += 1
        self.state["sum"] = self.state.get("sum", 0) + n
        self.state["count"] = self.state.get("count", 0) + 1
        self.emit([key, self.state["sum"], self.state["count"]])


class OwnAttributes(Topology):
    numbers = Numbers.spec()
    total = Total.spec(inputs={numbers: Grouping.fields("key")}, par=2)
