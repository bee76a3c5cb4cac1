"""Chain of two stateful bolts: per-key occurrences, then sums per parity."""

from sb_dag_parts import Grouping, Numbers, Occurrences, Sums, Topology


class Chain(Topology):
    numbers = Numbers.spec(par=1)
    occurrences = Occurrences.spec(inputs={numbers: Grouping.fields("k")}, par=2)
    sums = Sums.spec(inputs={occurrences: Grouping.fields("parity")}, par=2)
