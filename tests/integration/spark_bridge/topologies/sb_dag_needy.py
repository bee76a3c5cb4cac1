"""A bolt whose ``initialize`` needs ``needy.url`` in its conf."""

from sb_dag_parts import Bolt, Grouping, Numbers, Topology


class Needy(Bolt):
    outputs = ["n", "url"]

    def initialize(self, conf, context):
        self.url = conf["needy.url"]

    def process(self, tup):
        self.emit([tup.values[0], self.url])


class NeedyTopology(Topology):
    numbers = Numbers.spec(par=1)
    needy = Needy.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
