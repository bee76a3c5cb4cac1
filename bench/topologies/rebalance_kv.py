"""Keyed counts over many keys at a fixed input rate, for ``bench/rebalance.py``.

The spout's event ``n`` arrives at ``t0 + n / rebal.rate`` (events per second),
``rebal.events`` in all, each for key ``n mod rebal.keys``; ``t0`` is the first
spout start's wall-clock time, kept in ``rebal.out/t0`` so a restarted spout
(or the second run of a stop-restart) keeps the schedule. The stateful
``count`` keeps per key a count and ``rebal.pad`` bytes of padding (the state
size); each output reaches a ``sink`` task that appends
``n,latency_s,at`` to a file of its own. Parallelism of ``count`` per
environment: ``-e p2`` .. ``-e p8``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

PAR = {f"p{n}": n for n in range(1, 9)}


class Events(ReplayableSpout):
    outputs = ["key", "n", "due"]

    def initialize(self, stormconf, context):
        self.rate = float(stormconf.get("rebal.rate", 200))
        self.events = int(stormconf.get("rebal.events", 4000))
        self.keys = int(stormconf.get("rebal.keys", 1000))
        stamp = Path(stormconf["rebal.out"]) / "t0"
        if not stamp.exists():
            stamp.write_text(repr(time.time()))
        self.t0 = float(stamp.read_text())
        self.next_event = 0

    def seek(self, offset):
        self.next_event = 0 if offset is None else offset + 1

    def next_tuple(self):
        now = time.time()
        while self.next_event < self.events:
            n = self.next_event
            due = self.t0 + n / self.rate
            if due > now:
                return
            self.next_event += 1
            self.emit([f"k{n % self.keys:06d}", n, due], offset=n)


class Count(StatefulBolt):
    outputs = ["key", "count", "n", "due"]

    def initialize(self, stormconf, context):
        self.pad = "x" * int(stormconf.get("rebal.pad", 100))

    def process(self, tup):
        key, n, due = tup.values
        count = self.state.get("n", 0) + 1
        self.state["n"] = count
        if "pad" not in self.state:
            self.state["pad"] = self.pad
        self.emit([key, count, n, due])


class Sink(Bolt):
    outputs = []

    def initialize(self, stormconf, context):
        out = Path(stormconf["rebal.out"])
        self.file = (out / f"sink-{os.getpid()}.csv").open(
            "a", buffering=1, encoding="utf-8"
        )

    def process(self, tup):
        _key, _count, n, due = tup.values
        now = time.time()
        self.file.write(f"{n},{now - due:.6f},{now:.6f}\n")


class RebalanceKv(Topology):
    events = Events.spec(par=1)
    count = Count.spec(inputs={events: Grouping.fields("key")}, par=PAR)
    sink = Sink.spec(inputs={count: Grouping.SHUFFLE}, par=1)
