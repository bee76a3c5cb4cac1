"""The subprocess heartbeat timeout, probed apart: on Storm it halts the worker.

``blocker`` sleeps in ``process`` for :data:`BLOCKED_ID` far longer than
``topology.subprocess.timeout.secs``, once (a marker file in
``conformance.out`` keeps a restarted task from blocking again), so it answers
no heartbeat. On Storm 2.8.3 ShellBolt's heartbeat timer then "dies": the
whole worker halts, spout included, and is relaunched; its fresh spout emits
everything again. Records go to ``conformance.out`` as in :mod:`conformance`.
"""

from __future__ import annotations

import time
from pathlib import Path

from conformance import RecordBolt, _Recorder
from streamparse import Grouping, Spout, Topology

COUNT = 6
BLOCKED_ID = "h2"
SUBPROCESS_TIMEOUT_S = 5
BLOCK_S = 12 * SUBPROCESS_TIMEOUT_S
MESSAGE_TIMEOUT_S = 8


class HeartbeatSpout(Spout):
    """Emits ``h0`` ... ``h5`` once per process, with their ids as message ids."""

    outputs = ["id"]

    def initialize(self, storm_conf, context):
        self.recorder = _Recorder(storm_conf, context)
        self.next_n = 0

    def next_tuple(self):
        if self.next_n >= COUNT:
            return
        tup_id = f"h{self.next_n}"
        self.next_n += 1
        self.emit([tup_id], tup_id=tup_id)
        self.recorder.write("emit", id=tup_id)

    def ack(self, tup_id):
        self.recorder.write("ack", id=tup_id)

    def fail(self, tup_id):
        self.recorder.write("fail", id=tup_id)


class BlockBolt(RecordBolt):
    """Blocks once on :data:`BLOCKED_ID`, past the subprocess timeout."""

    def initialize(self, storm_conf, context):
        super().initialize(storm_conf, context)
        self.marker = Path(storm_conf["conformance.out"]) / "blocked"

    def process(self, tup):
        super().process(tup)
        if tup.values[0] == BLOCKED_ID and not self.marker.exists():
            self.marker.touch()
            self.recorder.write("blocked", id=BLOCKED_ID)
            time.sleep(BLOCK_S)
            self.recorder.write("unblocked", id=BLOCKED_ID)


class ConformanceHeartbeat(Topology):
    config = {
        "topology.subprocess.timeout.secs": SUBPROCESS_TIMEOUT_S,
        "topology.message.timeout.secs": MESSAGE_TIMEOUT_S,
    }
    spout = HeartbeatSpout.spec(par=1)
    blocker = BlockBolt.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
