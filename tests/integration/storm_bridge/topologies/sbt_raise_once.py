"""Replayable numbers -> a stateful total whose ``process`` raises once.

The first time the total sees ``sbt.raise_at`` it raises (a marker file in
``sbt.out_dir`` remembers it across restarts), as a bolt meeting a transient
error would.
"""

from pathlib import Path

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = 4


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


class Total(StatefulBolt):
    outputs = ["key", "sum", "count"]

    def initialize(self, storm_conf, context):
        self.raise_at = int(storm_conf.get("sbt.raise_at", -1))
        self.marker = Path(storm_conf["sbt.out_dir"]) / "raised"

    def process(self, tup):
        key, n = tup.values
        self.state["sum"] = self.state.get("sum", 0) + n
        self.state["count"] = self.state.get("count", 0) + 1
        if n == self.raise_at and not self.marker.exists():
            self.marker.write_text("once")
            msg = f"transient failure at {n}"
            raise ConnectionError(msg)
        self.emit([key, self.state["sum"], self.state["count"]])


class RaiseOnce(Topology):
    numbers = Numbers.spec()
    total = Total.spec(inputs={numbers: Grouping.fields("key")}, par=2)
