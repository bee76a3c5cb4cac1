"""The conformance probe: one run shows routing, values, acking, ticks and errors.

Run on both engines and compared by ``tests/integration/apache_storm/
test_conformance.py``. Everything is plain streamparse (no sr3 state, a plain
spout), so both runs use plain Storm acking. ``conformance.out`` names the
directory where each task appends JSON lines to ``<component>-<index>.jsonl``
(``index``: the position of its task id among its component's, ascending),
flushed line by line:

* the spout: ``emit``, ``ack`` and ``fail`` records with the tuple id;
* bolts: ``start`` (pid), ``tuple`` (stream, source, values as received),
  ``tick`` and ``heartbeat`` records, and ``raised`` before ``process`` raises.

A third stream, ``keyed`` (``key``, ``id``), repeats :data:`KEYS` without
message ids (so no acking records) for the partial-key grouping, which keys by
the first value: the same sequence from one sender, so the same tasks on both.
``partial_fields`` takes the default stream by a partial-key grouping on
``key`` and ``group`` (``storm_bridge.partial_key_grouping("key", "group")``,
a Java-serialized ``PartialKeyGrouping(Fields)``: the one sr3 import here).

A second spout, ``loaded`` (``topology.max.spout.pending`` 3), sends
:data:`LATE_IDS` on its ``slow`` stream to ``laggard``, which sleeps past twice
the message timeout on the first: it times out, and so does the second, queued
behind it; the others go to ``quick`` and are acked.

Direct emits are probed apart, by ``conformance_direct.py``: on Storm 2.8.3
they kill the worker. Values over :data:`DIGEST_OVER` characters are recorded
by length and SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from streamparse import Bolt, Grouping, Spout, Stream, Topology

from storm_bridge import partial_key_grouping

#: Storm's class, as streamparse can name it (``storm_bridge.partial_key_grouping``
#: spells the same; the probe stays plain streamparse).
PARTIAL_KEY = "org.apache.storm.grouping.PartialKeyGrouping"

#: Tuples on the default stream; every third id also goes out on ``side``.
COUNT = 60
SIDE_EVERY = 3
#: The tuple whose ``process`` raises (in ``raiser``) and the one never acked.
RAISE_ID = "d7"
SWALLOW_ID = "d11"
#: The id carrying the ~1 MB string.
LARGE_ID = "d13"
LARGE_CHARS = 1 << 20
DIGEST_OVER = 4096
TIMEOUT_S = 6

#: The loaded spout's tuples ``l0`` ... ``l7``; those on its ``slow`` stream
#: time out, the first by its own lag, the second waiting behind it.
LOAD_COUNT = 8
LATE_IDS = ("l2", "l5")
LAG_S = 2 * TIMEOUT_S + 4
#: Above the lag: the laggard answers no heartbeat while it sleeps.
SUBPROCESS_TIMEOUT_S = 60

KEYS = ("k0", "ключ1", "キー2", "emoji😀3", "k4", "𝄞5", "k6")
#: Second grouping field: every Java boxing Storm's JSON parser can produce.
GROUPS: tuple[Any, ...] = (
    0,
    -1,
    7,
    2**31,
    -(2**40),
    2**70,
    0.5,
    -2.25,
    0.12345678901234568,
    True,
    None,
    "g",
    [1, "two", None],
    {"a": 1},
)
SPECIAL: tuple[Any, ...] = (
    "plain",
    "ünïcödé 日本語 😀🚀 𝄞",
    {"z": [1, 2, {"b": None, "c": True}], "a": {"y": [False, 1.5]}, "m": "é"},
    [[], {}, [[["deep"]]], ""],
    2**63,
    -(2**63) - 1,
    2**64 + 7,
    10**30,
    2**31,
    -(2**31) - 1,
    0.1,
    1e300,
    -2.5e-8,
    1 / 3,
    None,
    True,
    False,
    'line\nbreak\ttab "quote" \\ back\u2028sep\u0000nul',
)


def payload(n: int) -> Any:
    """The ``value`` field of default-stream tuple ``d<n>``."""
    if f"d{n}" == LARGE_ID:
        return "€" * (LARGE_CHARS // 3) + "x" * (LARGE_CHARS % 3)
    return SPECIAL[n % len(SPECIAL)]


def default_tuple(n: int) -> list[Any]:
    """Fields ``id``, ``key``, ``group``, ``value`` of tuple ``d<n>``."""
    return [f"d{n}", KEYS[n % len(KEYS)], GROUPS[n % len(GROUPS)], payload(n)]


def side_tuple(n: int) -> list[Any]:
    """Fields ``id``, ``word`` of tuple ``s<n>`` on the ``side`` stream."""
    return [f"s{n}", f"side-{n}-ß"]


def keyed_tuple(n: int) -> list[Any]:
    """Fields ``key``, ``id`` of the untracked tuple ``k<n>`` on ``keyed``."""
    return [KEYS[n % len(KEYS)], f"k{n}"]


def emitted() -> dict[str, list[Any]]:
    """Every tuple the spout emits, by id."""
    tuples = {f"d{n}": default_tuple(n) for n in range(COUNT)}
    tuples.update({f"s{n}": side_tuple(n) for n in range(0, COUNT, SIDE_EVERY)})
    return tuples


def recorded(value: Any) -> Any:
    """``value`` as records hold it: long strings by length and digest."""
    if isinstance(value, str) and len(value) > DIGEST_OVER:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        return {"len": len(value), "sha256": digest}
    if isinstance(value, list):
        return [recorded(v) for v in value]
    return value


class _Recorder:
    """Opens this task's record file and appends flushed JSON lines."""

    def __init__(self, storm_conf: dict[str, Any], context: dict[str, Any]) -> None:
        component = context["componentid"]
        task = int(context["taskid"])
        tasks = sorted(
            int(t) for t, c in context["task->component"].items() if c == component
        )
        self.base = {"component": component, "index": tasks.index(task)}
        out = Path(storm_conf["conformance.out"])
        name = f"{component}-{self.base['index']}.jsonl"
        self.out = (out / name).open("a", encoding="utf-8")
        self.write("start", pid=os.getpid(), task=task)

    def write(self, kind: str, **fields: Any) -> None:
        row = {**self.base, "kind": kind, **fields}
        self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.out.flush()


class ProbeSpout(Spout):
    """Emits every tuple of :func:`emitted` once, with its id as message id."""

    outputs = [
        Stream(["id", "key", "group", "value"]),
        Stream(["id", "word"], name="side"),
        Stream(["key", "id"], name="keyed"),
    ]

    def initialize(self, storm_conf, context):
        self.recorder = _Recorder(storm_conf, context)
        self.count = int(storm_conf.get("conformance.count", COUNT))
        self.next_n = 0

    def next_tuple(self):
        if self.next_n >= self.count:
            return
        n = self.next_n
        self.next_n += 1
        self.emit(default_tuple(n), tup_id=f"d{n}")
        self.recorder.write("emit", id=f"d{n}")
        if n % SIDE_EVERY == 0:
            self.emit(side_tuple(n), tup_id=f"s{n}", stream="side")
            self.recorder.write("emit", id=f"s{n}")
        self.emit(keyed_tuple(n), stream="keyed")

    def ack(self, tup_id):
        self.recorder.write("ack", id=tup_id)

    def fail(self, tup_id):
        self.recorder.write("fail", id=tup_id)


class RecordBolt(Bolt):
    """Records every tuple, tick and heartbeat it gets."""

    outputs = []

    def initialize(self, storm_conf, context):
        self.recorder = _Recorder(storm_conf, context)

    def is_heartbeat(self, tup):
        beat = super().is_heartbeat(tup)
        if beat:
            self.recorder.write("heartbeat")
        return beat

    def process(self, tup):
        self.recorder.write(
            "tuple",
            stream=tup.stream,
            source=tup.component,
            values=recorded(list(tup.values)),
        )

    def process_tick(self, tup):
        self.recorder.write("tick", stream=tup.stream, source=tup.component)


class LoadSpout(Spout):
    """Emits ``l0`` ... ``l7`` with ids, :data:`LATE_IDS` on ``slow``."""

    outputs = [Stream(["id"]), Stream(["id"], name="slow")]

    def initialize(self, storm_conf, context):
        self.recorder = _Recorder(storm_conf, context)
        self.next_n = 0

    def next_tuple(self):
        if self.next_n >= LOAD_COUNT:
            return
        tup_id = f"l{self.next_n}"
        self.next_n += 1
        stream = "slow" if tup_id in LATE_IDS else "default"
        self.emit([tup_id], tup_id=tup_id, stream=stream)
        self.recorder.write("emit", id=tup_id)

    def ack(self, tup_id):
        self.recorder.write("ack", id=tup_id)

    def fail(self, tup_id):
        self.recorder.write("fail", id=tup_id)


class LagBolt(RecordBolt):
    """Sleeps :data:`LAG_S` on the first of :data:`LATE_IDS`, then acks."""

    def process(self, tup):
        super().process(tup)
        if tup.values[0] == LATE_IDS[0]:
            time.sleep(LAG_S)


class RaiseBolt(RecordBolt):
    """Raises in ``process`` for :data:`RAISE_ID`, never acks :data:`SWALLOW_ID`.

    ``exit_on_exception`` is off: pystorm reports the error, fails the tuple
    and goes on, so the raise does not restart the task (and, on Storm, its
    whole worker with the spout in it).
    """

    auto_ack = False
    exit_on_exception = False

    def process(self, tup):
        super().process(tup)
        tup_id = tup.values[0]
        if tup_id == RAISE_ID:
            self.recorder.write("raised", id=tup_id)
            msg = f"conformance probe raises for {tup_id}"
            raise ValueError(msg)
        if tup_id != SWALLOW_ID:
            self.ack(tup)


class Conformance(Topology):
    config = {
        "topology.message.timeout.secs": TIMEOUT_S,
        "topology.subprocess.timeout.secs": SUBPROCESS_TIMEOUT_S,
    }
    spout = ProbeSpout.spec(par=1)
    fields_one = RecordBolt.spec(inputs={spout: Grouping.fields("key")}, par=3)
    fields_two = RecordBolt.spec(inputs={spout: Grouping.fields("key", "group")}, par=3)
    shuffled = RecordBolt.spec(inputs={spout: Grouping.SHUFFLE}, par=2)
    everyone = RecordBolt.spec(inputs={spout["side"]: Grouping.ALL}, par=2)
    single = RecordBolt.spec(inputs={spout: Grouping.GLOBAL}, par=2)
    ticked = RecordBolt.spec(
        inputs={spout["side"]: Grouping.fields("word")},
        par=2,
        config={"topology.tick.tuple.freq.secs": 1},
    )
    raiser = RaiseBolt.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
    loaded = LoadSpout.spec(par=1, config={"topology.max.spout.pending": 3})
    laggard = LagBolt.spec(inputs={loaded["slow"]: Grouping.SHUFFLE}, par=1)
    quick = RecordBolt.spec(inputs={loaded: Grouping.SHUFFLE}, par=1)
    partial = RecordBolt.spec(
        inputs={spout["keyed"]: Grouping.custom_object(PARTIAL_KEY, [])}, par=3
    )
    partial_fields = RecordBolt.spec(
        inputs={spout: partial_key_grouping("key", "group")}, par=3
    )
