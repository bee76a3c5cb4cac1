"""Word count rebalanced while it runs on Spark (``sr3 rebalance``, a restart)."""

from spark_rebalance_parts import Count, GatedLines, Split
from streamparse import Grouping, Topology


class SparkRebalance(Topology):
    lines = GatedLines.spec(par=1)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)
