"""A spout that emits with message ids and writes down what Storm acks.

``source`` (two tasks) emits ``[n]`` with message id ``"m<n>"`` for
``n < acks.n`` (default 12); its ``ack`` appends the id to
``<acks.dir>/<task id>.acks`` (one line per call). ``echo`` passes ``n`` on.
"""

from pathlib import Path

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout


class Source(ReplayableSpout):
    outputs = ["n"]

    def initialize(self, conf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.limit = int(conf.get("acks.n", 12))
        self.log_path = Path(conf["acks.dir"]) / f"{context['taskid']}.acks"
        self.next = self.index

    def seek(self, offset):
        self.next = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next < self.limit:
            n = self.next
            self.next += self.step
            self.emit([n], offset=n, tup_id=f"m{n}")

    def ack(self, tup_id):
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"{tup_id}\n")


class Echo(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit([tup.values[0]])


class Acks(Topology):
    source = Source.spec(par=2)
    echo = Echo.spec(inputs={source: Grouping.SHUFFLE}, par=1)
