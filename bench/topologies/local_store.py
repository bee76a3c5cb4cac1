"""Eight stateful tasks under a paced stream, each logging its progress.

A replayable spout (2 tasks) first emits ``lr.fill`` records of
``lr.value.bytes`` each (one key per record: the state, about
``fill * value.bytes`` in all), as fast as it can; then ``lr.stream`` records
of 16 bytes over the same keys at ``lr.rate`` records per second in all,
paced from the end of the fill (a spout sought back after a rollback catches
up at full speed: the schedule's origin is kept in a file of ``lr.out``).
``store`` (8 tasks, fields grouping on the key) keeps the
last payload per key and appends ``P <time> <pid>`` per processed tuple and
``R <time> <pid>`` when it is ready (after its restore; preceded by
``S <time> <pid>``, when its process imported this file, i.e. had started) to
``<lr.out>/store-<task>.tsv``::

    sr3 run bench/topologies/local_store.py --until-idle -o lr.out=/tmp/lr
"""

from __future__ import annotations

import os
import random
import string
import time
from pathlib import Path

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

POOL_BYTES = 1 << 20
#: When this process imported the topology (its start, before any restore).
STARTED_AT = time.time()


class Records(ReplayableSpout):
    outputs = ["key", "payload"]

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.fill = int(stormconf.get("lr.fill", 20000))
        self.total = self.fill + int(stormconf.get("lr.stream", 20000))
        self.size = int(stormconf.get("lr.value.bytes", 4096))
        self.per_task_s = self.step / float(stormconf.get("lr.rate", 1000))
        rng = random.Random(7)  # noqa: S311 (test data, not secrets)
        self.pool = "".join(rng.choices(string.ascii_letters, k=POOL_BYTES))
        self.next_record = self.index
        self.fill_done_at = None
        self.out = Path(stormconf["lr.out"])

    def _schedule_origin(self):
        # the first incarnation to stream records the schedule's origin: a
        # restarted spout keeps to it (and catches up at full speed)
        path = self.out / f"spout-{self.index}.origin"
        if path.exists():
            return float(path.read_text(encoding="utf-8"))
        origin = time.time()
        path.write_text(repr(origin), encoding="utf-8")
        return origin

    def seek(self, offset):
        self.next_record = self.index if offset is None else offset + self.step

    def next_tuple(self):
        r = self.next_record
        if r >= self.total:
            return
        if r >= self.fill:
            if self.fill_done_at is None:
                self.fill_done_at = self._schedule_origin()
            due = self.fill_done_at + ((r - self.fill) // self.step) * self.per_task_s
            wait = due - time.time()
            if wait > 0:
                time.sleep(min(wait, 0.005))
                if wait > 0.005:
                    return
            size = 16
        else:
            size = self.size
        self.next_record += self.step
        start = (r * 7919) % (POOL_BYTES - size)
        key = f"k{r % self.fill}"
        self.emit([key, self.pool[start : start + size]], offset=r)


class Store(StatefulBolt):
    outputs = []

    def initialize(self, conf, ctx):
        out = Path(conf["lr.out"]) / f"store-{ctx['taskid']}.tsv"
        self.log = out.open("a", encoding="utf-8", buffering=1 << 16)
        self.pid = os.getpid()
        self.log.write(f"S\t{STARTED_AT}\t{self.pid}\n")
        self.log.write(f"R\t{time.time()}\t{self.pid}\n")
        self.log.flush()
        self.flushed_at = time.time()

    def process(self, tup):
        key, payload = tup.values
        self.state["v"] = payload
        now = time.time()
        self.log.write(f"P\t{now}\t{self.pid}\n")
        if now - self.flushed_at > 0.05:
            self.log.flush()
            self.flushed_at = now


class LocalStore(Topology):
    records = Records.spec(par=2)
    store = Store.spec(inputs={records: Grouping.fields("key")}, par=8)
