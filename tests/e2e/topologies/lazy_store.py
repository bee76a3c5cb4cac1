"""Two stateful tasks holding a few MB in many key groups, and a sink."""

from lazy_parts import Records, Sink, Store
from streamparse import Grouping, Topology


class LazyStore(Topology):
    records = Records.spec(par=2)
    store = Store.spec(inputs={records: Grouping.fields("key")}, par=2)
    sink = Sink.spec(inputs={store: Grouping.fields("key")}, par=1)
