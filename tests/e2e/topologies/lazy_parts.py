"""Components of the lazy-restore test topology (beside its file).

``Records`` (a replayable spout) first fills ``lazy.keys`` keys with a payload
of ``lazy.value.bytes`` each, then streams ``lazy.updates`` small updates over
the same keys, pausing ``lazy.pause.s`` per record. ``Store`` keeps each key's
payload and an update count, and emits ``(key, count, payload length)`` to
``Sink``, which appends every line it gets to ``<lazy.out>/sink-<task>.tsv``.
With ``lazy.die.loading`` set, a ``Store`` task restarted after a failure
SIGKILLs itself once, at a tuple it processes while its state is still
arriving (a second failure during the lazy restore); it notes each tuple it
processed while loading in ``<lazy.out>/loading-<task>.txt``.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

from streamparse import Bolt

from storm_bridge import ReplayableSpout, StatefulBolt


def payload(record: int, size: int) -> str:
    """``size`` hex digits drawn from ``record`` (the same on every run)."""
    digits = random.Random(record).getrandbits(4 * size)  # noqa: S311 (test data)
    return f"{digits:0{size}x}"[:size]


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
        self.keys = int(stormconf["lazy.keys"])
        self.total = self.keys + int(stormconf["lazy.updates"])
        self.size = int(stormconf["lazy.value.bytes"])
        self.pause_s = float(stormconf.get("lazy.pause.s", 0))
        self.next_record = self.index

    def seek(self, offset):
        self.next_record = self.index if offset is None else offset + self.step

    def next_tuple(self):
        r = self.next_record
        if r >= self.total:
            self.end_of_input()
            return
        self.next_record += self.step
        if r >= self.keys:
            import time  # noqa: PLC0415 - only the stream phase paces

            time.sleep(self.pause_s)
        size = self.size if r < self.keys else 16
        self.emit([f"k{(r * 7) % self.keys}", payload(r, size)], offset=r)


class Store(StatefulBolt):
    outputs = ["key", "count", "length"]

    def initialize(self, conf, ctx):
        out = Path(conf["lazy.out"])
        self.task = ctx["taskid"]
        self.started = out / f"started-{self.task}"
        self.restarted = self.started.exists()
        self.started.touch()
        self.die = bool(conf.get("lazy.die.loading")) and self.restarted
        self.died = out / f"died-{self.task}"
        self.loading_log = out / f"loading-{self.task}.txt"

    def process(self, tup):
        key, value = tup.values
        if self.state_loading:
            with self.loading_log.open("a", encoding="utf-8") as log:
                log.write(f"{os.getpid()}\n")
            if self.die and not self.died.exists():
                self.died.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        count = self.state.get("count", 0) + 1
        self.state["count"] = count
        if len(value) > 16:
            self.state["payload"] = value
        else:
            self.state["last"] = value
        self.emit([key, count, len(self.state.get("payload", ""))])


class Sink(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        path = Path(conf["lazy.out"]) / f"sink-{ctx['taskid']}.tsv"
        self.out = path.open("a", encoding="utf-8")

    def process(self, tup):
        self.out.write("\t".join(str(v) for v in tup.values) + "\n")
        self.out.flush()
