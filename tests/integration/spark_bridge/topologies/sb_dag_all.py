"""ALL grouping: every ``fan`` task sees every number."""

from sb_dag_parts import Fan, Grouping, Numbers, Topology


class AllGrouping(Topology):
    numbers = Numbers.spec(par=1)
    fan = Fan.spec(inputs={numbers: Grouping.ALL}, par=3)
