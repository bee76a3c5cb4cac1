"""A bolt whose ``initialize`` always raises, beside a bolt slow to start.

The ``SlowStartBolt`` process sleeps ``SBT_SLOW_START_S`` seconds (default 30)
before its handshake, so every start of the flaky bolt dies while the slow one
is not up: the topology is never wholly ready, as when a loaded machine keeps
two crash-looping tasks from ever being up at the same moment.
"""

import os
import sys
import time

from sbt_components import RecordBolt, SentenceSpout
from sbt_init_faults import FlakyInitBolt
from streamparse import Topology

if any(arg.endswith(".SlowStartBolt") for arg in sys.argv):
    time.sleep(float(os.environ.get("SBT_SLOW_START_S", "30")))


class SlowStartBolt(RecordBolt):
    """Records its tuples; its process is slow to reach its handshake."""


class SlowStart(Topology):
    sentence_spout = SentenceSpout.spec()
    flaky_bolt = FlakyInitBolt.spec(inputs=[sentence_spout])
    slow_bolt = SlowStartBolt.spec(inputs=[sentence_spout])
