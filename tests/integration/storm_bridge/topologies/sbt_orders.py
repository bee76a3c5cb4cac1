"""Orders and payments -> a stateful join -> a stateless shuffle -> a ledger.

The join is keyed on the order id and emits once per completed order (the
order and its payment both seen); the stateless ``normalise`` bolt gets its
tuples by shuffle grouping; the ledger, keyed on (customer, currency), adds
amounts and counts orders, which is not idempotent. Exactly-once effect on
state means every ledger key ends with the totals of :func:`expected_ledger`.

``sbt.slow_at`` makes ``normalise`` stall for ``sbt.slow_s`` the first time it
sees that order (a marker file in ``sbt.out_dir`` remembers it), so its tree
times out under a short ``topology.message.timeout.secs``.
"""

import time
from pathlib import Path

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

CUSTOMERS = ["ada", "bob", "cy", "dee", "eve"]
CURRENCIES = ["eur", "usd"]


def order(n):
    """Return order ``n``: (order id, customer, currency, amount)."""
    customer = CUSTOMERS[(n * 7) % len(CUSTOMERS)]
    currency = CURRENCIES[(n // 3) % len(CURRENCIES)]
    return f"o{n}", customer, currency, 1 + (n * 13) % 97


def expected_ledger(count):
    """Return the ledger state a failure-free run ends with."""
    ledger = {}
    for n in range(count):
        _oid, customer, currency, amount = order(n)
        entry = ledger.setdefault((customer, currency.upper()), {"total": 0, "n": 0})
        entry["total"] += amount
        entry["n"] += 1
    return ledger


class _Numbered(ReplayableSpout):
    def initialize(self, storm_conf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.count = int(storm_conf.get("sbt.orders", 300))
        self.next_n = self.index

    def seek(self, offset):
        self.next_n = self.index if offset is None else offset + self.step

    def next_tuple(self):
        if self.next_n < self.count:
            n = self.next_n
            self.next_n += self.step
            self.emit(self.values(n), offset=n)


class Orders(_Numbered):
    outputs = ["order_id", "customer", "currency"]

    def values(self, n):
        oid, customer, currency, _amount = order(n)
        return [oid, customer, currency]


class Payments(_Numbered):
    outputs = ["order_id", "amount"]

    def values(self, n):
        oid, _customer, _currency, amount = order(n)
        return [oid, amount]


class Join(StatefulBolt):
    outputs = ["order_id", "customer", "currency", "amount"]

    def process(self, tup):
        if tup.component == "orders":
            self.state["order"] = tup.values[1:]
        else:
            self.state["amount"] = tup.values[1]
        if (
            "order" in self.state
            and "amount" in self.state
            and "done" not in self.state
        ):
            self.state["done"] = True
            customer, currency = self.state["order"]
            self.emit([tup.values[0], customer, currency, self.state["amount"]])


class Normalise(Bolt):
    outputs = ["customer", "currency", "amount"]

    def initialize(self, storm_conf, context):
        self.slow_at = storm_conf.get("sbt.slow_at")
        self.slow_s = float(storm_conf.get("sbt.slow_s", 0))
        self.marker = Path(storm_conf.get("sbt.out_dir") or ".") / "slowed"

    def process(self, tup):
        oid, customer, currency, amount = tup.values
        if oid == self.slow_at and not self.marker.exists():
            self.marker.write_text("once")
            time.sleep(self.slow_s)  # a stall under load, once
        self.emit([customer, currency.upper(), amount])


class Ledger(StatefulBolt):
    outputs = ["customer", "currency", "total"]

    def process(self, tup):
        customer, currency, amount = tup.values
        self.state["total"] = self.state.get("total", 0) + amount
        self.state["n"] = self.state.get("n", 0) + 1
        self.emit([customer, currency, self.state["total"]])


class OrdersLedger(Topology):
    orders = Orders.spec(par=2)
    payments = Payments.spec(par=2)
    join = Join.spec(
        inputs={
            orders: Grouping.fields("order_id"),
            payments: Grouping.fields("order_id"),
        },
        par=2,
    )
    normalise = Normalise.spec(inputs={join: Grouping.SHUFFLE}, par=2)
    ledger = Ledger.spec(
        inputs={normalise: Grouping.fields("customer", "currency")}, par=2
    )
