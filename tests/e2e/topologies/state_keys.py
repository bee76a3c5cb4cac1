"""Two stateful counters behind one fields grouping, for rescaling tests.

A replayable spout emits ``statekeys.events`` visits ``(user, page)``, with
users from -5 to 34 (negative ints hash differently per integer boxing). Both
counters subscribe with ``fields("user")``:

- ``per_user`` keeps the default state key, the grouping values ``(user,)``;
- ``per_page`` overrides ``state_key`` to ``(user, page)``: a state key that
  differs from its grouping fields.

The counters' parallelism is picked per environment (``par={"p1": 1, ...}``,
streamparse's per-environment parallelism): ``sr3 run -e p3`` runs them on
three tasks. A run with more events and ``--resume`` continues the count.
"""

from __future__ import annotations

import random
from collections import Counter

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

PAGES = ("home", "cart", "search", "item", "help", "ünïcode")
PAR = {"p1": 1, "p2": 2, "p3": 3, "p4": 4}


def visits(count: int, seed: int = 3) -> list[tuple[int, str]]:
    """Return the first ``count`` visits of the deterministic sequence."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    return [(rng.randint(-5, 34), rng.choice(PAGES)) for _ in range(count)]


def expected(count: int) -> tuple[Counter[int], Counter[tuple[int, str]]]:
    """Return the exact per-user and per-(user, page) counts of ``count`` visits."""
    seen = visits(count)
    return Counter(user for user, _page in seen), Counter(seen)


class Visits(ReplayableSpout):
    outputs = ["user", "page"]

    def initialize(self, stormconf, context):
        self.visits = visits(int(stormconf.get("statekeys.events", 600)))
        self.next = 0

    def seek(self, offset):
        self.next = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next >= len(self.visits):
            self.end_of_input()
            return
        n = self.next
        self.next += 1
        self.emit(list(self.visits[n]), offset=n)


class PerUser(StatefulBolt):
    outputs = []

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + 1


class PerPage(StatefulBolt):
    outputs = []

    def state_key(self, tup):
        return (tup.values[0], tup.values[1])

    def process(self, tup):
        self.state["n"] = self.state.get("n", 0) + 1


class StateKeys(Topology):
    visits = Visits.spec(par=1)
    per_user = PerUser.spec(inputs={visits: Grouping.fields("user")}, par=PAR)
    per_page = PerPage.spec(inputs={visits: Grouping.fields("user")}, par=PAR)
