"""Keys Python holds equal but state keeps apart: 1, 1.0 and True (and 0, False)."""

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = [1, 1.0, True, 0, False, "1"]


class Lookalikes(ReplayableSpout):
    outputs = ["key"]

    def initialize(self, storm_conf, context):
        self.next_n = 0

    def seek(self, offset):
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < 3 * len(KEYS):
            n = self.next_n
            self.next_n += 1
            self.emit([KEYS[n % len(KEYS)]], offset=n)


class Seen(StatefulBolt):
    outputs = ["key", "seen"]

    def process(self, tup):
        self.state["seen"] = self.state.get("seen", 0) + 1
        self.emit([tup.values[0], self.state["seen"]])


class LookalikeKeys(Topology):
    keys = Lookalikes.spec()
    seen = Seen.spec(inputs={keys: Grouping.fields("key")}, par=2)
