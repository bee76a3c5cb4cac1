"""A bolt that prints its tuples to stdout, the multilang channel (a user's slip)."""

from sbt_components import SentenceSpout
from streamparse import Bolt, Topology


class PrintingBolt(Bolt):
    outputs = ["sentence"]

    def process(self, tup):
        print("got", tup.values[0])  # noqa: T201 (the mistake under test)
        self.emit(tup.values)


class Stdout(Topology):
    sentence_spout = SentenceSpout.spec()
    printing_bolt = PrintingBolt.spec(inputs=[sentence_spout])
