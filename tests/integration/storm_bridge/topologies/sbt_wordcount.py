"""Word count: sentences -> split (shuffle, 2 tasks) -> count (fields, 3 tasks)."""

from sbt_components import CountBolt, SentenceSpout, SplitBolt
from streamparse import Grouping, Topology


class WordCount(Topology):
    sentence_spout = SentenceSpout.spec()
    split_bolt = SplitBolt.spec(inputs=[sentence_spout], par=2)
    count_bolt = CountBolt.spec(inputs={split_bolt: Grouping.fields("word")}, par=3)
