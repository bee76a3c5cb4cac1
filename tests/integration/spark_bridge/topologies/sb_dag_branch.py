"""Branch: ``numbers`` feeds a stateless ``double`` and a stateful ``sums``."""

from sb_dag_parts import Double, Grouping, Numbers, Sums, Topology


class Branch(Topology):
    numbers = Numbers.spec(par=2)
    double = Double.spec(inputs={numbers: Grouping.SHUFFLE}, par=2)
    sums = Sums.spec(inputs={numbers: Grouping.fields("k")}, par=2)
