"""A spout whose source is down while ``<sbt.out_dir>/source-down`` exists.

While it is down the spout emits nothing and says it waits for its source
(``waiting_for_source``); once the file is gone it emits ``sbt.sentences``.
"""

from pathlib import Path

from sbt_components import CountBolt
from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout


class WaitingSpout(ReplayableSpout):
    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = list(storm_conf.get("sbt.sentences", []))
        self.down = Path(storm_conf["sbt.out_dir"]) / "source-down"
        self.position = 0

    def seek(self, offset):
        self.position = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.down.exists():
            self.waiting_for_source(f"{self.down} exists")
            return
        self.waiting_for_source(None)
        if self.position < len(self.words):
            word = self.words[self.position]
            self.emit([word], offset=self.position, tup_id=str(self.position))
            self.position += 1


class Waiting(Topology):
    waiting_spout = WaitingSpout.spec()
    count_bolt = CountBolt.spec(inputs={waiting_spout: Grouping.fields("word")}, par=2)
