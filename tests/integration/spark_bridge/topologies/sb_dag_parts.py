"""Spouts and bolts shared by the DAG test topologies (tiny and deterministic).

``Numbers`` task ``i`` of ``p`` emits ``[n, n % 3]`` for the ``n < dag.n``
(default 12) with ``n % p == i``, offset ``n``; ``dag.scale`` multiplies ``n``
(so two spouts of one topology can emit different values).
"""

from streamparse import Bolt, Grouping, Topology  # noqa: F401 (re-exported)

from storm_bridge import ReplayableSpout, StatefulBolt


def task_index(context):
    tasks = sorted(
        int(t)
        for t, c in context["task->component"].items()
        if c == context["componentid"]
    )
    return tasks.index(int(context["taskid"])), len(tasks)


class Numbers(ReplayableSpout):
    outputs = ["n", "k"]

    def initialize(self, conf, context):
        self.index, self.step = task_index(context)
        self.limit = int(conf.get("dag.n", 12))
        self.scale = int(conf.get("dag.scale", 1))
        self.shift = int(conf.get("dag.key.shift", 0))  # negative keys when > 0
        self.next = self.index

    def seek(self, offset):
        self.next = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next < self.limit:
            n = self.next
            self.next += self.step
            self.emit([n * self.scale, n % 3 - self.shift], offset=n)


class Double(Bolt):
    outputs = ["n", "k"]

    def process(self, tup):
        self.emit([tup.values[0] * 2, tup.values[1]])


class Fan(Bolt):
    """Emits each tuple with its own task index (run with an ALL grouping)."""

    outputs = ["n", "task"]

    def initialize(self, conf, context):
        self.index, _count = task_index(context)

    def process(self, tup):
        self.emit([tup.values[0], self.index])


class Sums(StatefulBolt):
    """Per key: the sum of n and the count, per source component."""

    outputs = ["k", "total"]

    def process(self, tup):
        n, k = tup.values[0], tup.values[1]
        self.state[tup.component] = self.state.get(tup.component, 0) + n
        self.state["count"] = self.state.get("count", 0) + 1
        self.emit([k, self.state[tup.component]])


class Occurrences(StatefulBolt):
    """Counts a key's tuples; emits the parity of that count with n."""

    outputs = ["n", "parity"]

    def process(self, tup):
        count = self.state.get("count", 0) + 1
        self.state["count"] = count
        self.emit([tup.values[0], count % 2])


class Picky(StatefulBolt):
    """Sums n per key, but raises on ``n == 7`` after touching state and emitting."""

    outputs = ["k", "sum"]

    def process(self, tup):
        n, k = tup.values[0], tup.values[1]
        self.state["sum"] = self.state.get("sum", 0) + n
        self.state["seen"] = [*self.state.get("seen", []), n]
        self.emit([k, self.state["sum"]])
        if n == 7:
            msg = "seven is not allowed"
            raise ValueError(msg)
