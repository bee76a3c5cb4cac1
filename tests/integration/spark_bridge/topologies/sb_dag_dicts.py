"""Tuples holding dicts with non-string keys and Python tuples, across components.

``wrap`` emits ``[k, {n: n, True: 1, None: 2, 1.5: 3}, (n, "x")]``; ``kinds``
keeps, per ``k``, the key types of that dict and the type of the last value,
as the bolt receives them.
"""

from sb_dag_parts import Bolt, Grouping, Numbers, StatefulBolt, Topology


class Wrap(Bolt):
    outputs = ["k", "map", "pair"]

    def process(self, tup):
        n, k = tup.values
        self.emit([k, {n: n, True: 1, None: 2, 1.5: 3}, (n, "x")])


class Kinds(StatefulBolt):
    outputs = ["k", "keys"]

    def process(self, tup):
        keys = sorted(repr(key) for key in tup.values[1])
        self.state["keys"] = keys
        self.state["pair"] = type(tup.values[2]).__name__
        self.emit([tup.values[0], keys])


class Dicts(Topology):
    numbers = Numbers.spec(par=1)
    wrap = Wrap.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
    kinds = Kinds.spec(inputs={wrap: Grouping.fields("k")}, par=1)
