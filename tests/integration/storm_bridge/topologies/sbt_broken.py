"""A topology whose components fail to import in tasks that have SBT_BREAK set."""

import os

from sbt_components import RecordBolt, SentenceSpout
from streamparse import Topology

if os.environ.get("SBT_BREAK"):
    msg = "broken on purpose"
    raise ImportError(msg)


class BrokenSpout(SentenceSpout):
    pass


class BrokenBolt(RecordBolt):
    pass


class Broken(Topology):
    sentence_spout = BrokenSpout.spec()
    record_bolt = BrokenBolt.spec(inputs=[sentence_spout])
