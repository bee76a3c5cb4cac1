"""Word count with a sink recording every emitted count (components beside it)."""

from exact_parts import Count, Lines, Sink, Split
from streamparse import Grouping, Topology


class ExactWordCount(Topology):
    lines = Lines.spec(par=2)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(
        inputs={split: Grouping.fields("word")},
        par=3,
        config={"sr3.recovery.mechanism": "tree"},
    )
    sink = Sink.spec(inputs={count: Grouping.fields("word")}, par=2)
