"""Outputs as the Storm engine reports them: unsubscribed streams, topology keys.

``tag``'s ``default`` stream goes nowhere while its ``evens`` stream feeds
``last``: both ``tag`` and ``last`` have outputs. The topology config keys every
output by its ``k`` field (``sr3.output.key.fields``).
"""

from sb_dag_parts import Bolt, Grouping, Numbers, Topology
from streamparse import Stream


class Tag(Bolt):
    outputs = [Stream(fields=["n", "k"]), Stream(fields=["n"], name="evens")]

    def process(self, tup):
        n, k = tup.values
        self.emit([n, k])
        if n % 2 == 0:
            self.emit([n], stream="evens")


class Last(Bolt):
    outputs = ["n", "k"]

    def process(self, tup):
        self.emit([tup.values[0], tup.values[0] % 3])


class Outputs(Topology):
    config = {"sr3.output.key.fields": "k"}
    numbers = Numbers.spec(par=1)
    tag = Tag.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
    last = Last.spec(inputs={tag["evens"]: Grouping.SHUFFLE}, par=1)
