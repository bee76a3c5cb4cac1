"""Emits that ask for their task ids, and bolts that record where tuples land.

``source`` (two tasks) emits ``[n, n % 3]`` for ``n < ids.n`` (default 12) with
``need_task_ids=True`` and reports what the emit returned on its ``ids``
stream; ``fan`` (ALL), ``keyed`` (fields on ``k``), ``glob`` (global) and
``relay`` (shuffle) receive it. ``relay`` re-emits ``[n, bytes of k]`` on
``fwd`` with ``need_task_ids=True`` (reported on its ``ids`` stream) to
``shuf`` (shuffle), ``fan2`` (ALL) and ``count`` (stateful, fields on ``k``).
Every receiver emits ``["<source> <n> -> <component> <task id> from <tuple's
task> <type of k>", n]``, so the report's outputs hold one entry per
delivery, keyed by that text.
"""

from streamparse import Bolt, Grouping, Stream, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


def task_index(context):
    tasks = sorted(
        int(t)
        for t, c in context["task->component"].items()
        if c == context["componentid"]
    )
    return tasks.index(int(context["taskid"])), len(tasks)


def seen(tup, where):
    kind = type(tup.values[1]).__name__
    return f"{tup.component} {tup.values[0]} -> {where} from {tup.task} {kind}"


class Source(ReplayableSpout):
    outputs = [Stream(["n", "k"]), Stream(["what", "ids"], name="ids")]

    def initialize(self, conf, context):
        self.index, self.step = task_index(context)
        self.limit = int(conf.get("ids.n", 12))
        self.next = self.index

    def seek(self, offset):
        self.next = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next < self.limit:
            n = self.next
            self.next += self.step
            ids = self.emit([n, n % 3], offset=n, need_task_ids=True)
            self.emit([f"source {n}", ids], offset=n, stream="ids")


class Mark(Bolt):
    outputs = [Stream(["at", "n"])]

    def initialize(self, conf, context):
        self.where = f"{context['componentid']} {context['taskid']}"

    def process(self, tup):
        n = tup.values[0]
        self.emit([seen(tup, self.where), n])


class Relay(Mark):
    outputs = [
        Stream(["at", "n"]),
        Stream(["n", "k"], name="fwd"),
        Stream(["what", "ids"], name="ids"),
    ]

    def process(self, tup):
        super().process(tup)
        n = tup.values[0]
        ids = self.emit([n, str(n % 3).encode()], stream="fwd", need_task_ids=True)
        self.emit([f"relay {n}", ids], stream="ids")


class Count(StatefulBolt):
    outputs = [Stream(["at", "n"])]

    def initialize(self, conf, context):
        self.where = f"{context['componentid']} {context['taskid']}"

    def process(self, tup):
        n = tup.values[0]
        self.state["n"] = self.state.get("n", 0) + 1
        self.emit([seen(tup, self.where), n])


class TaskIds(Topology):
    source = Source.spec(par=2)
    fan = Mark.spec(inputs={source: Grouping.ALL}, par=2)
    keyed = Mark.spec(inputs={source: Grouping.fields("k")}, par=3)
    glob = Mark.spec(inputs={source: Grouping.GLOBAL}, par=2)
    relay = Relay.spec(inputs={source: Grouping.SHUFFLE}, par=3)
    shuf = Mark.spec(inputs={relay["fwd"]: Grouping.SHUFFLE}, par=3)
    fan2 = Mark.spec(inputs={relay["fwd"]: Grouping.ALL}, par=2)
    count = Count.spec(inputs={relay["fwd"]: Grouping.fields("k")}, par=2)
