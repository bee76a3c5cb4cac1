"""Join: two spouts into one stateful bolt, grouped by the same field."""

from sb_dag_parts import Grouping, Numbers, Sums, Topology


class Join(Topology):
    left = Numbers.spec(par=1)
    right = Numbers.spec(par=2, config={"dag.scale": 100})
    sums = Sums.spec(
        inputs={left: Grouping.fields("k"), right: Grouping.fields("k")}, par=2
    )
