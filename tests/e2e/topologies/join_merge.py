"""Join of two sides merged from several upstream tasks (components beside it)."""

from join_parts import Join, Left, Right, Sink, Tag
from streamparse import Grouping, Topology


class JoinMerge(Topology):
    left = Left.spec(par=2)
    right = Right.spec(par=1)
    tag = Tag.spec(inputs={left: Grouping.SHUFFLE, right: Grouping.SHUFFLE}, par=2)
    join = Join.spec(inputs={tag: Grouping.fields("key")}, par=2)
    sink = Sink.spec(inputs={join: Grouping.SHUFFLE}, par=1)
