"""Components of the live-rebalance test topology (word count and a join).

Every spout emits its events (``rebal.delay.s`` between two) up to its budget:
the number in the file ``<rebal.gates>/<component>`` (0 while it is missing).
At its budget it sends keep-alive tuples on a stream nobody reads, so the run
stays busy (never idle) while the test rebalances it; the test raises budgets
to let tuples flow at chosen moments.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from streamparse import Bolt, Stream

from storm_bridge import ReplayableSpout, StatefulBolt

VOCABULARY = [f"w{i:02d}" for i in range(40)]
KEEPALIVE = "keepalive"


def corpus(lines: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(5)) for _ in range(lines)]


def orders(count: int) -> list[tuple[int, int]]:
    """(order id, amount), in a shuffled order."""
    rng = random.Random(7)
    ids = list(range(count))
    rng.shuffle(ids)
    return [(i, 10 + i % 17) for i in ids]


def payments(count: int) -> list[tuple[int, int]]:
    """(order id, paid), in another shuffled order."""
    rng = random.Random(9)
    ids = list(range(count))
    rng.shuffle(ids)
    return [(i, 100 + i % 13) for i in ids]


class _Paced(ReplayableSpout):
    """Emits ``self.events`` with offsets, paced and gated (see the module)."""

    outputs = ["a", "b", Stream(fields=["tick"], name=KEEPALIVE)]

    def events_of(self, conf):
        raise NotImplementedError

    def initialize(self, conf, context):
        self.events = self.events_of(conf)
        self.delay_s = float(conf.get("rebal.delay.s", 0.01))
        self.gate = Path(conf["rebal.gates"]) / context["componentid"]
        self.budget = 0
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next >= len(self.events):
            self.end_of_input()
            return
        if self.next >= self.budget:
            if self.gate.exists():
                self.budget = int(self.gate.read_text(encoding="utf-8") or 0)
            if self.next >= self.budget:
                time.sleep(0.01)
                self.emit([0], stream=KEEPALIVE)
                return
        time.sleep(self.delay_s)
        n = self.next
        self.next += 1
        self.emit(list(self.events[n]), offset=n)


class Lines(_Paced):
    outputs = ["line", Stream(fields=["tick"], name=KEEPALIVE)]

    def events_of(self, conf):
        return [(line,) for line in corpus(int(conf["rebal.lines"]))]


class Orders(_Paced):
    outputs = ["id", "amount", Stream(fields=["tick"], name=KEEPALIVE)]

    def events_of(self, conf):
        return orders(int(conf["rebal.orders"]))


class Payments(_Paced):
    outputs = ["id", "paid", Stream(fields=["tick"], name=KEEPALIVE)]

    def events_of(self, conf):
        return payments(int(conf["rebal.orders"]))


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def process(self, tup):
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])


class Join(StatefulBolt):
    """Joins an order with its payment; emits the pair once both arrived."""

    outputs = ["id", "amount", "paid"]

    def process(self, tup):
        if tup.component == "orders":
            self.state["amount"] = tup.values[1]
        else:
            self.state["paid"] = tup.values[1]
        if "amount" in self.state and "paid" in self.state:
            self.state["joined"] = self.state.get("joined", 0) + 1
            self.emit([tup.values[0], self.state["amount"], self.state["paid"]])


class Sink(Bolt):
    """Appends every tuple it receives to a file of its task."""

    outputs = []

    def initialize(self, conf, ctx):
        name = f"{ctx['componentid']}-{ctx['taskid']}.tsv"
        self.out = (Path(conf["rebal.out"]) / name).open("a", encoding="utf-8")

    def process(self, tup):
        self.out.write("\t".join(str(v) for v in tup.values) + "\n")
        self.out.flush()
