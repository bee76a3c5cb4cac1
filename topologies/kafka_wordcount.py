"""Exactly-once word count from Kafka to Kafka.

Lines come from the Kafka topic ``sr3.kafka.topics`` (default ``lines``), are
split into words, counted per word in a stateful bolt, and every new count goes
to the topic ``sr3.kafka.sink.topic`` (default ``counts``) as the JSON record
``{"word": w, "count": n}`` keyed by the word. Outputs become visible to
``read_committed`` consumers when their epoch commits, each exactly once. Run it
against a lab broker with::

    sr3 lab up --kafka
    sr3 lab topic lines && sr3 lab topic counts
    (write lines to the topic ``lines``)
    sr3 run topologies/kafka_wordcount.py --lab lab --until-idle \\
        -o sr3.kafka.bootstrap=$(sr3 status --json | jq -r .kafka.bootstrap)
"""

from __future__ import annotations

from streamparse import Bolt, Grouping, Topology

from storm_bridge import StatefulBolt
from storm_bridge.kafka import KafkaSink, KafkaSpout


class Lines(KafkaSpout):
    outputs = ["line"]


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def process(self, tup):
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        self.emit([tup.values[0], n])


class Results(KafkaSink):
    pass


class KafkaWordCount(Topology):
    config = {
        "sr3.kafka.topics": "lines",
        "sr3.kafka.sink.topic": "counts",
        "sr3.kafka.sink.key.field": "word",
    }
    lines = Lines.spec(par=2)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)
    results = Results.spec(inputs={count: Grouping.SHUFFLE}, par=2)
