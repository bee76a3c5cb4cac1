"""Running products per key modulo 2**521 - 1: the state's ints outgrow 64 bits
within a few tuples and stay about 520 bits."""

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt


class Factors(ReplayableSpout):
    outputs = ["key", "factor"]

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("sbt.count", 300))
        self.next_n = 0

    def seek(self, offset):
        self.next_n = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_n < self.count:
            n = self.next_n
            self.next_n += 1
            self.emit([f"k{n % 4}", n + 1_000_003], offset=n)


MODULUS = 2**521 - 1


class Product(StatefulBolt):
    outputs = ["key", "digits"]

    def process(self, tup):
        key, factor = tup.values
        product = self.state.get("product", 1) * factor % MODULUS
        self.state["product"] = product
        self.state["history"] = [*self.state.get("history", [])[-2:], -product]
        # a tuple stays within Storm's 64-bit JSON ints
        self.emit([key, product.bit_length()])


class BigInts(Topology):
    factors = Factors.spec()
    product = Product.spec(inputs={factors: Grouping.fields("key")}, par=2)
