"""A stateful bolt raising on one tuple (``n == 7``, key ``[1]``)."""

from sb_dag_parts import Grouping, Numbers, Picky, Topology


class PickyTopology(Topology):
    numbers = Numbers.spec(par=1)
    picky = Picky.spec(inputs={numbers: Grouping.fields("k")}, par=2)
