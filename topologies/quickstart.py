"""streamparse's quickstart word count (stateless), its components in one file.

Run it on the local multilang cluster::

    from storm_bridge.cluster import LocalCluster

    with LocalCluster("topologies/quickstart.py", {"wordcount.rounds": 3}) as cluster:
        cluster.run_until_idle(timeout_s=30)
        print(cluster.counters())

The spout emits ``wordcount.rounds`` rounds of its word list (forever when the
conf key is 0), reliably; the counter logs every 1000th count of a word.
"""

from __future__ import annotations

from collections import Counter
from itertools import cycle

from streamparse import Bolt, Grouping, Spout, Topology

WORDS = ("dog", "cat", "zebra", "elephant", "the", "quick", "brown", "fox")


class WordSpout(Spout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        rounds = int(stormconf.get("wordcount.rounds", 0))
        self.remaining = rounds * len(WORDS) if rounds else None
        self.words = cycle(WORDS)
        self.next_id = 0

    def next_tuple(self):
        if self.remaining == 0:
            return
        if self.remaining is not None:
            self.remaining -= 1
        self.next_id += 1
        self.emit([next(self.words)], tup_id=str(self.next_id))


class WordCountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, conf, ctx):
        self.counter = Counter()

    def process(self, tup):
        word = tup.values[0]
        self.counter[word] += 1
        if self.counter[word] % 1000 == 0:
            self.logger.info("counted %s %s times", word, self.counter[word])
        self.emit([word, self.counter[word]])


class WordCount(Topology):
    config = {"topology.max.spout.pending": 500}
    word_spout = WordSpout.spec()
    count_bolt = WordCountBolt.spec(inputs={word_spout: Grouping.fields("word")}, par=2)
