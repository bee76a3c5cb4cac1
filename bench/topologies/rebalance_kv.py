"""Keyed counts over many keys at a fixed input rate, for ``bench/rebalance.py``.

The spout's event ``n`` arrives at ``t0 + n / rebal.rate`` (events per second),
``rebal.events`` in all, each for key ``n mod rebal.keys``; ``t0`` is the first
spout start's wall-clock time, kept in ``rebal.out/t0`` so a restarted spout
(or the second run of a stop-restart) keeps the schedule. The stateful
``count`` keeps per key a count and ``rebal.pad`` bytes of padding (the state
size); each output reaches a ``sink`` task that appends
``n,latency_s,at`` to a file of its own. Parallelism of ``count`` per
environment: ``-e p2`` .. ``-e p8``.

Cold state: ``rebal.fill`` keys ``f000000``.. of ``rebal.fill.bytes`` each come
first, unpaced (spout offsets ``0 .. fill-1``; event ``n`` is offset
``fill + n``), and make no output; ``t0`` is stamped when the first paced event
is due, so a run of the fill alone (``rebal.events=0``) followed by a
``--resume`` run starts the schedule after the restore.
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
        self.fill = int(stormconf.get("rebal.fill", 0))
        self.stamp = Path(stormconf["rebal.out"]) / "t0"
        self.t0 = None
        self.next_offset = 0

    def seek(self, offset):
        self.next_offset = 0 if offset is None else offset + 1

    def start_schedule(self):
        if not self.stamp.exists():
            self.stamp.write_text(repr(time.time()))
        return float(self.stamp.read_text())

    def next_tuple(self):
        for _ in range(64):  # the fill: unpaced, a slice a call
            if self.next_offset >= self.fill:
                break
            key = f"f{self.next_offset:06d}"
            self.emit([key, -1, 0.0], offset=self.next_offset)
            self.next_offset += 1
        else:
            return
        if self.next_offset >= self.fill + self.events:
            return
        if self.t0 is None:
            self.t0 = self.start_schedule()
        now = time.time()
        while self.next_offset < self.fill + self.events:
            n = self.next_offset - self.fill
            due = self.t0 + n / self.rate
            if due > now:
                return
            self.next_offset += 1
            self.emit([f"k{n % self.keys:06d}", n, due], offset=self.fill + n)


class Count(StatefulBolt):
    outputs = ["key", "count", "n", "due"]

    def initialize(self, stormconf, context):
        self.pad = "x" * int(stormconf.get("rebal.pad", 100))
        self.fill_pad = "x" * int(stormconf.get("rebal.fill.bytes", 0))

    def process(self, tup):
        key, n, due = tup.values
        if n < 0:  # cold state of the fill: no output
            self.state["pad"] = self.fill_pad
            return
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
