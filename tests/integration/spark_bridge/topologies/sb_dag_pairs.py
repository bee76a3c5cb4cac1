"""A spout whose offsets are ``(file, line)`` tuples, as a file-tailing spout's.

``files`` emits ``[file, line]`` for ``dag.n`` lines of ``a.log`` then of
``b.log``, offset ``(file, line)``; ``seek`` gets the offset back as a list
(Storm's commit records and Spark's offset log both store JSON). ``lines``
counts the lines per file. With ``dag.text``, ``prose`` emits a bare string
instead of a list on line 2 of ``b.log`` (pystorm refuses that emit).
"""

from sb_dag_parts import Bolt, Grouping, StatefulBolt, Topology

from storm_bridge import ReplayableSpout

FILES = ("a.log", "b.log")


class Files(ReplayableSpout):
    outputs = ["file", "line"]

    def initialize(self, conf, context):
        self.lines = int(conf.get("dag.n", 12))
        self.at = (0, 0)

    def _after(self, index, line):
        return (index, line + 1) if line + 1 < self.lines else (index + 1, 0)

    def seek(self, offset):
        if offset is None:
            self.at = (0, 0)
        else:
            name, line = offset
            self.at = self._after(FILES.index(name), line)

    def next_tuple(self):
        index, line = self.at
        if index < len(FILES):
            self.emit([FILES[index], line], offset=(FILES[index], line))
            self.at = self._after(index, line)


class Prose(Bolt):
    outputs = ["file", "line"]

    def initialize(self, conf, context):
        self.text = bool(conf.get("dag.text"))

    def process(self, tup):
        if self.text and tuple(tup.values) == ("b.log", 2):
            self.emit("b.log line 2")
        else:
            self.emit(list(tup.values))


class Lines(StatefulBolt):
    outputs = ["file", "lines"]

    def process(self, tup):
        self.state["lines"] = self.state.get("lines", 0) + 1
        self.emit([tup.values[0], self.state["lines"]])


class Pairs(Topology):
    files = Files.spec(par=1)
    prose = Prose.spec(inputs={files: Grouping.SHUFFLE}, par=1)
    lines = Lines.spec(inputs={prose: Grouping.fields("file")}, par=2)
