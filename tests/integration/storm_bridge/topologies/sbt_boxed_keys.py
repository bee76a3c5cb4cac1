"""Counts per int key, negative keys included; the counter's par comes from the
environment (``SBT_COUNT_PAR``, default 2) so a test can redeploy it rescaled."""

import os

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

KEYS = [-3, -2, -1, 0, 1, 2, 3, 2**31, -(2**31) - 1, 10**12]


class IntKeys(ReplayableSpout):
    outputs = ["key"]

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("sbt.count", 100))
        self.next_n = 0

    def seek(self, offset):
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < self.count:
            n = self.next_n
            self.next_n += 1
            self.emit([KEYS[n % len(KEYS)]], offset=n)


class Count(StatefulBolt):
    outputs = ["key", "n"]

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + 1
        self.emit([tup.values[0], self.state["n"]])


class BoxedKeys(Topology):
    keys = IntKeys.spec()
    count = Count.spec(
        inputs={keys: Grouping.fields("key")},
        par=int(os.environ.get("SBT_COUNT_PAR", "2")),
    )
