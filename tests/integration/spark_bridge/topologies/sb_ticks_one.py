"""``sb_ticks`` with one stateful bolt (``applyInPandasWithState``): ``agg`` is a sink.

Every ``[k, sum]`` that ``agg`` emits on its ticks reaches the sink; per ``k``
they add up to the number of ``n`` with that ``k``.
"""

from sb_ticks import TICKED, Agg, Buffer, Grouping, Source, Topology


class TicksOne(Topology):
    source = Source.spec(par=2)
    buffer = Buffer.spec(inputs={source: Grouping.SHUFFLE}, par=2, config=TICKED)
    agg = Agg.spec(inputs={buffer: Grouping.fields("k")}, par=2, config=TICKED)
