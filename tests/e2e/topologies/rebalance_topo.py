"""Word count and an order/payment join, for live rebalancing (``sr3 rebalance``)."""

from rebalance_parts import Count, Join, Lines, Orders, Payments, Sink, Split
from streamparse import Grouping, Topology


class RebalanceTopo(Topology):
    lines = Lines.spec(par=1)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)
    count_sink = Sink.spec(inputs={count: Grouping.fields("word")}, par=1)
    orders = Orders.spec(par=1)
    payments = Payments.spec(par=1)
    join = Join.spec(
        inputs={orders: Grouping.fields("id"), payments: Grouping.fields("id")},
        par=2,
    )
    join_sink = Sink.spec(inputs={join: Grouping.fields("id")}, par=1)
