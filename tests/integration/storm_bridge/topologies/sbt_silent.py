"""Sentences -> a bolt that never acks, so every tree times out."""

from sbt_components import SentenceSpout, SilentBolt
from streamparse import Topology


class Silent(Topology):
    sentence_spout = SentenceSpout.spec()
    silent_bolt = SilentBolt.spec(inputs=[sentence_spout])
