"""The conformance probe's direct grouping, apart: on Storm 2.8.3 it kills the worker.

A Python bolt's ``emit(..., direct_task=T)`` sends ``"task": T`` in its JSON
emit; Storm >= 2.6 parses that small integer as an ``Integer`` and
``JsonSerializer.readShellMsg`` casts it to ``Long``: ClassCastException,
"ShellBolt died", the worker halts (and is relaunched, to die again). Records
go to ``conformance.out`` as in :mod:`conformance`.
"""

from __future__ import annotations

from conformance import ProbeSpout, RecordBolt
from streamparse import Bolt, Grouping, Stream, Topology

#: Tuples the spout emits here (``d0`` ... ``d8``, with their ``side`` tuples).
COUNT = 9


class DirectBolt(Bolt):
    """Sends each tuple to task ``n % 3`` of ``directed`` on its direct stream."""

    outputs = [Stream(["id", "value"], name="direct", direct=True)]

    def initialize(self, storm_conf, context):
        tasks = context["task->component"]
        self.targets = sorted(int(t) for t, c in tasks.items() if c == "directed")

    def process(self, tup):
        tup_id, _key, _group, value = tup.values
        target = self.targets[int(tup_id[1:]) % len(self.targets)]
        self.emit([tup_id, value], stream="direct", direct_task=target)


class ConformanceDirect(Topology):
    config = {"conformance.count": COUNT, "topology.message.timeout.secs": 6}
    spout = ProbeSpout.spec(par=1)
    director = DirectBolt.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
    directed = RecordBolt.spec(inputs={director["direct"]: Grouping.DIRECT}, par=3)
