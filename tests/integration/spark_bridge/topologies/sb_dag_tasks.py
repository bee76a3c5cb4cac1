"""Task placement: fields-grouped, global and keyed bolts report their task index.

``numbers`` (two tasks) feeds ``fields`` (stateless, fields grouping on ``k``),
``glob`` (stateless, global grouping) and ``keyed`` (stateful, fields grouping on
``k``), each with three tasks; every bolt emits ``[n, its task index]``.
"""

from sb_dag_parts import Bolt, Grouping, Numbers, StatefulBolt, Topology, task_index


class Where(Bolt):
    outputs = ["n", "task"]

    def initialize(self, conf, context):
        self.index, _count = task_index(context)

    def process(self, tup):
        self.emit([tup.values[0], self.index])


class KeyedWhere(StatefulBolt):
    """Also keeps, per key, the task indexes that saw it."""

    outputs = ["n", "task"]

    def initialize(self, conf, context):
        self.index, _count = task_index(context)

    def process(self, tup):
        self.state["tasks"] = sorted({*self.state.get("tasks", []), self.index})
        self.emit([tup.values[0], self.index])


class Tasks(Topology):
    numbers = Numbers.spec(par=2)
    fields = Where.spec(inputs={numbers: Grouping.fields("k")}, par=3)
    glob = Where.spec(inputs={numbers: Grouping.GLOBAL}, par=3)
    keyed = KeyedWhere.spec(inputs={numbers: Grouping.fields("k")}, par=3)
