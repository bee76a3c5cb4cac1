"""Word count ending at its stateful count: nothing downstream (parts beside it).

Its count tasks emit to no component, so on real Storm a rollback restores only
the tasks that lost their state (``sr3.recovery.scope=task``).
"""

from exact_parts import Count, Lines, Split
from streamparse import Grouping, Topology


class ExactCount(Topology):
    lines = Lines.spec(par=2)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=3)
