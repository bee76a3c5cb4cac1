"""Bolts that hold tuples back until a tick tuple, on stateless and stateful bolts.

``source`` (two tasks) emits ``[n, n % 3]`` for ``n < ticks.n`` (default 12).
``buffer`` (shuffle, ticked every second) counts per ``k`` and emits
``[k, count]`` on each tick; ``agg`` (stateful, fields on ``k``, ticked)
adds the counts to its state and to a buffer of its task, and emits
``[k, sum]`` per buffered key on each tick; ``total`` (stateful) adds those
up, so its final state per ``k`` is the number of ``n`` with that ``k``.
``silent`` overrides ``process_tick`` but sets no tick frequency: Storm never
ticks it, so it never emits.
"""

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

TICKED = {"topology.tick.tuple.freq.secs": 1}


def task_index(context):
    tasks = sorted(
        int(t)
        for t, c in context["task->component"].items()
        if c == context["componentid"]
    )
    return tasks.index(int(context["taskid"])), len(tasks)


class Source(ReplayableSpout):
    outputs = ["n", "k"]

    def initialize(self, conf, context):
        self.index, self.step = task_index(context)
        self.limit = int(conf.get("ticks.n", 12))
        self.next = self.index

    def seek(self, offset):
        self.next = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next < self.limit:
            n = self.next
            self.next += self.step
            self.emit([n, n % 3], offset=n)


class Buffer(Bolt):
    outputs = ["k", "count"]

    def initialize(self, conf, context):
        self.counts = {}

    def process(self, tup):
        k = tup.values[1]
        self.counts[k] = self.counts.get(k, 0) + 1

    def process_tick(self, tup):
        for k, count in sorted(self.counts.items()):
            self.emit([k, count])
        self.counts = {}


class Agg(StatefulBolt):
    outputs = ["k", "sum"]

    def initialize(self, conf, context):
        self.pending = {}

    def process(self, tup):
        k, count = tup.values
        self.state["seen"] = self.state.get("seen", 0) + count
        self.pending[k] = self.pending.get(k, 0) + count

    def process_tick(self, tup):
        for k, count in sorted(self.pending.items()):
            self.emit([k, count])
        self.pending = {}


class Total(StatefulBolt):
    outputs = ["k", "total"]

    def process(self, tup):
        k, count = tup.values
        self.state["total"] = self.state.get("total", 0) + count
        self.emit([k, self.state["total"]])


class Silent(Bolt):
    outputs = ["what", "task"]

    def process(self, tup):
        pass

    def process_tick(self, tup):
        self.emit(["ticked", tup.values[0]])


class Ticks(Topology):
    source = Source.spec(par=2)
    buffer = Buffer.spec(inputs={source: Grouping.SHUFFLE}, par=2, config=TICKED)
    agg = Agg.spec(inputs={buffer: Grouping.fields("k")}, par=2, config=TICKED)
    total = Total.spec(inputs={agg: Grouping.fields("k")}, par=1)
    silent = Silent.spec(inputs={source: Grouping.SHUFFLE}, par=1)
