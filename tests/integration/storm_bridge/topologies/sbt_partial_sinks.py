"""Split bolts whose default or ``loud`` stream goes nowhere: partial sinks."""

from sbt_components import RecordBolt, SentenceSpout, SplitBolt
from streamparse import Topology


class PartialSinks(Topology):
    sentence_spout = SentenceSpout.spec()
    # words go nowhere, shouted words feed loud_sink
    split_bolt = SplitBolt.spec(inputs=[sentence_spout])
    loud_sink = RecordBolt.spec(inputs=[split_bolt["loud"]])
    # words feed word_sink, shouted words go nowhere
    split_too = SplitBolt.spec(inputs=[sentence_spout])
    word_sink = RecordBolt.spec(inputs=[split_too])
