"""Large keyed state, fast: a replayable spout of (key, payload), a storing bolt.

Spout task ``i`` of ``n`` emits records ``i, i + n, ...`` below
``bigstate.records`` (default 100000), record ``r`` as key ``k<r mod keys>``
(``bigstate.keys``, default: one key per record) with a deterministic ASCII
payload of ``bigstate.value.bytes`` (default 1024) cut from a seeded pool, and
``r`` as its offset. The ``store`` bolt keeps the last payload per key, so it
ends holding about ``records * value.bytes`` of state (100 MiB by default).
The recovery mechanism of ``store`` comes from ``sr3.recovery.mechanism`` in
the run's conf (``-o sr3.recovery.mechanism=star``), else ``auto``::

    sr3 run bench/topologies/bigstate.py --until-idle -o bigstate.records=20000
"""

from __future__ import annotations

import random
import string

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

POOL_BYTES = 1 << 20


def payload_pool(seed: int) -> str:
    """Return a seeded 1 MiB string that payloads are cut from."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=POOL_BYTES))


class Payloads(ReplayableSpout):
    outputs = ["key", "payload"]

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.records = int(stormconf.get("bigstate.records", 100000))
        self.keys = int(stormconf.get("bigstate.keys") or self.records)
        self.size = int(stormconf.get("bigstate.value.bytes", 1024))
        self.pool = payload_pool(int(stormconf.get("bigstate.seed", 7)))
        self.span = len(self.pool) - self.size
        self.next_record = self.index

    def seek(self, offset):
        self.next_record = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_record >= self.records:
            return
        r = self.next_record
        self.next_record += self.step
        start = (r * 7919) % self.span
        self.emit([f"k{r % self.keys}", self.pool[start : start + self.size]], offset=r)


class Store(StatefulBolt):
    outputs = ["key"]

    def process(self, tup):
        self.state["v"] = tup.values[1]


class BigState(Topology):
    payloads = Payloads.spec(par=1)
    store = Store.spec(inputs={payloads: Grouping.fields("key")}, par=1)
