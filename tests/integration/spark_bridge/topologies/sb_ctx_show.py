"""A bolt that reports the conf and context its ``initialize`` received.

On its first tuple ``show`` emits ``["conf", json of conf]`` and ``["context",
json of context]``. The topology's config, the component's ``config=`` and the
run's overrides all set ``ctx.b``; a component ``config=`` key Storm does not
let components override (``topology.message.timeout.secs``) must be dropped.
"""

import json

from sb_dag_parts import Bolt, Grouping, Numbers, StatefulBolt, Topology


class Show(Bolt):
    outputs = ["what", "json"]

    def initialize(self, conf, context):
        self.seen = {"conf": conf, "context": context}

    def process(self, tup):
        if tup.values[0] == 0:
            for what, value in sorted(self.seen.items()):
                self.emit([what, json.dumps(value, sort_keys=True)])


class Sums(StatefulBolt):
    outputs = ["k", "n"]

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + tup.values[0]
        self.emit([tup.values[1], self.state["n"]])


class CtxShow(Topology):
    config = {"ctx.a": "topology", "ctx.b": "topology"}
    zeta = Numbers.spec(par=2)
    show = Show.spec(
        inputs={zeta: Grouping.SHUFFLE},
        par=1,
        config={"ctx.b": "component", "topology.message.timeout.secs": 99},
    )
    alpha = Sums.spec(inputs={zeta: Grouping.fields("k")}, par=3)
