"""Spouts and bolts for the local-cluster tests (run as real streamparse_run tasks).

Conf keys (``sbt.*``) steer them: the sentences to emit, the directory where
count bolts append ``word count`` lines, and which words trigger faults.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from streamparse import Bolt, Spout, Stream

FAULT_WORDS = ("hang", "garbage", "unknown", "badack", "poison")


class SentenceSpout(Spout):
    """Emits ``sbt.sentences`` once, reliably (message id = index); logs acks/fails."""

    outputs = ["sentence"]

    def initialize(self, storm_conf, context):
        self.sentences = list(storm_conf.get("sbt.sentences", []))
        self.log_emits = bool(storm_conf.get("sbt.log_emits"))
        self.position = 0

    def next_tuple(self):
        if self.position < len(self.sentences):
            self.emit([self.sentences[self.position]], tup_id=str(self.position))
            if self.log_emits:
                self.log(f"emitted {self.position}")
            self.position += 1

    def activate(self):
        self.log("activated")

    def deactivate(self):
        self.log("deactivated")

    def ack(self, tup_id):
        self.log(f"acked {tup_id}")

    def fail(self, tup_id):
        self.log(f"failed {tup_id}")


class SplitBolt(Bolt):
    """Splits sentences into words; ``loud`` words also go upper-case on ``loud``."""

    outputs = [Stream(["word"], name="default"), Stream(["word"], name="loud")]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])
            if word.endswith("!"):
                self.emit([word.upper()], stream="loud")


class CountBolt(Bolt):
    """Counts words and appends ``word count`` lines to ``sbt.out_dir``."""

    outputs = ["word", "count"]

    def initialize(self, storm_conf, context):
        self.counts = {}
        out_dir = Path(storm_conf["sbt.out_dir"])
        self.out = (out_dir / f"count-{context['taskid']}.txt").open("a")

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.out.write(f"{word} {self.counts[word]}\n")
        self.out.flush()
        self.emit([word, self.counts[word]])


class RecordBolt(Bolt):
    """Appends every tuple it gets, with its source and stream, as JSON lines."""

    outputs = []

    def initialize(self, storm_conf, context):
        out_dir = Path(storm_conf["sbt.out_dir"])
        self.task = context["taskid"]
        self.out = (
            out_dir / f"record-{context['componentid']}-{self.task}.jsonl"
        ).open("a")

    def _record(self, tup, kind):
        row = {"task": self.task, "kind": kind, "source": tup.component}
        row.update({"stream": tup.stream, "values": list(tup.values)})
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()

    def process(self, tup):
        self._record(tup, "tuple")
        self.report_metric("records", {"stream": tup.stream})

    def process_tick(self, tup):
        self._record(tup, "tick")
        self.log(f"tick {list(tup.values)}")


class DirectSplitBolt(Bolt):
    """Sends each word directly to the ``direct_sink`` task its length picks."""

    outputs = [Stream(["word"], name="direct", direct=True), Stream(["word"])]

    def initialize(self, storm_conf, context):
        tasks = context["task->component"]
        self.targets = sorted(int(t) for t, c in tasks.items() if c == "direct_sink")

    def process(self, tup):
        for word in tup.values[0].split():
            target = self.targets[len(word) % len(self.targets)]
            self.emit([word], stream="direct", direct_task=target)
            task_ids = self.emit([word], need_task_ids=True)
            self.log(f"default {word} -> {task_ids}")


class FaultyBolt(Bolt):
    """Counts words like CountBolt, but misbehaves on the fault words."""

    outputs = ["word", "count"]

    def initialize(self, storm_conf, context):
        self.counts = {}
        out_dir = Path(storm_conf["sbt.out_dir"])
        self.out = (out_dir / f"faulty-{context['taskid']}.txt").open("a")

    def process(self, tup):
        word = tup.values[0]
        if word == "hang":
            time.sleep(600)  # stops answering heartbeats
        elif word == "garbage":
            os.write(1, b"this is not a multilang message\nend\n")
        elif word == "unknown":
            self.send_message({"command": "frobnicate"})
        elif word == "badack":
            self.ack("no-such-tuple-id")
        elif word == "poison":
            msg = f"cannot digest {word!r}"
            raise ValueError(msg)
        self.counts[word] = self.counts.get(word, 0) + 1
        self.out.write(f"{word} {self.counts[word]}\n")
        self.out.flush()
        self.emit([word, self.counts[word]])


class SilentBolt(Bolt):
    """Never acks: its tuples can only time out."""

    outputs = []
    auto_ack = False

    def process(self, tup):
        pass
