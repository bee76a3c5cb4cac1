"""Two branches that share nothing: a bolt that never finishes, and a word count.

``stuck_bolt`` sleeps on its first tuple, so its queue grows past
``topology.shellbolt.max.pending``; ``free_spout``'s tuples never reach it.
"""

import time

from sbt_components import CountBolt, SentenceSpout
from streamparse import Bolt, Grouping, Topology


class StuckBolt(Bolt):
    outputs = []

    def process(self, tup):
        time.sleep(3600)  # never done: the congested branch under test


class Branches(Topology):
    stuck_spout = SentenceSpout.spec()
    stuck_bolt = StuckBolt.spec(inputs={stuck_spout: Grouping.SHUFFLE})
    free_spout = SentenceSpout.spec()
    count_bolt = CountBolt.spec(inputs={free_spout: Grouping.fields("sentence")})
