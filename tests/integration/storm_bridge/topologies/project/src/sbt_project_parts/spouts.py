"""Emits ``sbt.sentences`` once, reliably."""

from streamparse import Spout


class ProjectWordSpout(Spout):
    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = list(storm_conf.get("sbt.sentences", []))

    def next_tuple(self):
        if self.words:
            word = self.words.pop()
            self.emit([word], tup_id=f"{word}-{len(self.words)}")
