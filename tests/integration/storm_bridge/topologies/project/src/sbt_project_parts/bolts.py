"""A word counter that appends ``word count`` lines to ``sbt.out_dir``."""

from pathlib import Path

from streamparse import Bolt


class ProjectCountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, storm_conf, context):
        self.counts = {}
        out_dir = Path(storm_conf["sbt.out_dir"])
        self.out = (out_dir / f"count-{context['taskid']}.txt").open("a")

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.out.write(f"{word} {self.counts[word]}\n")
        self.out.flush()
        self.emit([word, self.counts[word]])
