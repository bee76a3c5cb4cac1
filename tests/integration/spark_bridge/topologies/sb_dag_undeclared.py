"""``loose`` emits on a stream it never declared when ``n == 4`` (Storm's
executor refuses that emit: the task dies with "Unknown stream ID")."""

from sb_dag_parts import Bolt, Grouping, Numbers, Sums, Topology


class Loose(Bolt):
    outputs = ["n", "k"]

    def process(self, tup):
        n, k = tup.values
        self.emit([n, k])
        if n == 4:
            self.emit([n, k], stream="nosuch")


class Undeclared(Topology):
    numbers = Numbers.spec(par=1)
    loose = Loose.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
    sums = Sums.spec(inputs={loose: Grouping.fields("k")}, par=2)
