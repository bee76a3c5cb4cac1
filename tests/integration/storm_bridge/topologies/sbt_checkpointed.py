"""Checkpointed topology: replayable and plain spouts, stateless and stateful bolts."""

from streamparse import Bolt, Grouping, Spout, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


class Words(ReplayableSpout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.words = list(stormconf.get("ck.words", []))
        self.next_word = self.index

    def seek(self, offset):
        self.next_word = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_word < len(self.words):
            n = self.next_word
            self.next_word += self.step
            self.emit([self.words[n]], offset=n)


class PlainWords(Spout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.words = list(stormconf.get("ck.plain", []))

    def next_tuple(self):
        if self.words:
            self.emit([self.words.pop(0)])


class Upper(Bolt):
    outputs = ["word"]

    def process(self, tup):
        self.emit([tup.values[0].upper()])


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def process(self, tup):
        if tup.values[0] == "POISON":
            msg = "poison tuple"
            raise ValueError(msg)
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])


class Checkpointed(Topology):
    words = Words.spec(par=2)
    plain = PlainWords.spec(par=1)
    upper = Upper.spec(inputs={words: Grouping.SHUFFLE}, par=2)
    count = Count.spec(
        inputs={upper: Grouping.fields("word"), plain: Grouping.fields("word")},
        par=2,
    )
