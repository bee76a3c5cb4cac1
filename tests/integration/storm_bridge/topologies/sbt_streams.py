"""Named, direct and ALL/GLOBAL/SHUFFLE subscriptions, plus tick tuples."""

from sbt_components import DirectSplitBolt, RecordBolt, SentenceSpout, SplitBolt
from streamparse import Grouping, Topology


class Streams(Topology):
    config = {"topology.message.timeout.secs": 20}
    sentence_spout = SentenceSpout.spec()
    split_bolt = SplitBolt.spec(inputs=[sentence_spout])
    loud_sink = RecordBolt.spec(inputs={split_bolt["loud"]: Grouping.ALL}, par=2)
    global_sink = RecordBolt.spec(
        inputs={split_bolt: Grouping.GLOBAL},
        par=2,
        config={"topology.tick.tuple.freq.secs": 1},
    )
    direct_split = DirectSplitBolt.spec(inputs=[sentence_spout])
    direct_sink = RecordBolt.spec(
        inputs={direct_split["direct"]: Grouping.DIRECT}, par=2
    )
    shuffle_sink = RecordBolt.spec(inputs=[direct_split], par=2)
