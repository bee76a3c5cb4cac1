"""Sentences -> split -> a faulty counter that misbehaves on the fault words."""

from sbt_components import FaultyBolt, SentenceSpout, SplitBolt
from streamparse import Grouping, Topology


class Faults(Topology):
    sentence_spout = SentenceSpout.spec()
    split_bolt = SplitBolt.spec(inputs=[sentence_spout], par=2)
    faulty_bolt = FaultyBolt.spec(inputs={split_bolt: Grouping.fields("word")}, par=2)
