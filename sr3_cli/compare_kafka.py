"""``sr3 compare`` with a ``KafkaSink``: one output topic per engine, compared.

Every engine reads the same input topic from its start; were they to write
the same output topic too, its records could not be told apart. So each
engine's run writes ``<sink topic>-<engine>`` (created like the sink topic,
with its partition count, when missing), unless ``-o sr3.kafka.sink.topic``
names one topic for all. After the run, what the run added to its topic is
read ``read_committed`` and kept key by key: ``{record key: sorted record
values}``, which :func:`~sr3_cli.compare_verdict.verdict` compares as it
compares the state. Exactly once on both engines means the same records per
key, whatever order the engines wrote them in.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from spark_bridge.context import storm_conf
from spark_bridge.kafka_sink import is_kafka_sink
from sr3.errors import ConfigError
from topology_api.topology import LoadedTopology

__all__ = ["SINK_TOPIC_KEY", "SinkTopics", "sink_topics"]

#: The Storm conf key of a ``KafkaSink``'s output topic.
SINK_TOPIC_KEY: Final = "sr3.kafka.sink.topic"
_TIMEOUT_S: Final = 30.0
_NO_KEY: Final = ""


@dataclass(frozen=True)
class SinkTopics:
    """The ``KafkaSink`` components of a compared topology and where they write.

    Attributes:
        bootstrap: The brokers.
        base: ``{component: sink topic}`` the topology and ``-o`` give.
        per_engine: Whether each engine writes its own topic.
    """

    bootstrap: str
    base: Mapping[str, str]
    per_engine: bool

    def topic(self, component: str, engine: str) -> str:
        """Return the topic ``component`` writes during ``engine``'s run."""
        base = self.base[component]
        return f"{base}-{engine}" if self.per_engine else base

    def conf(self, conf: Mapping[str, Any], engine: str) -> dict[str, Any]:
        """Return the Storm conf overrides of ``engine``'s run."""
        if not self.per_engine:
            return dict(conf)
        (component,) = self.base  # per_engine: a single sink topic
        return {**conf, SINK_TOPIC_KEY: self.topic(component, engine)}

    def prepare(self, engine: str) -> dict[str, dict[int, int]]:
        """Create ``engine``'s topics when missing; return their end offsets now.

        Raises:
            ConfigError: Kafka refused or did not answer.
        """
        from confluent_kafka import KafkaException  # noqa: PLC0415 (fast --help)

        try:
            return {
                c: self._ensure(self.topic(c, engine), self.base[c]) for c in self.base
            }
        except KafkaException as exc:
            msg = (
                f"sr3 compare: Kafka at {self.bootstrap} failed preparing "
                f"{engine}'s output topics: {exc}"
            )
            raise ConfigError(msg) from exc

    def read(
        self, engine: str, starts: Mapping[str, Mapping[int, int]]
    ) -> dict[str, dict[str, Any]]:
        """Return what ``engine``'s run wrote, per sink: topic, records, rows.

        ``rows`` is ``{record key: sorted record values}`` (JSON values decoded).

        Raises:
            ConfigError: Kafka failed, or a topic was not read to its end in 30 s.
        """
        from confluent_kafka import KafkaException  # noqa: PLC0415 (fast --help)

        out: dict[str, dict[str, Any]] = {}
        for component in self.base:
            topic = self.topic(component, engine)
            try:
                values = self._records(topic, starts.get(component, {}))
            except KafkaException as exc:
                msg = f"sr3 compare: reading {topic} from {self.bootstrap}: {exc}"
                raise ConfigError(msg) from exc
            rows: dict[str, list[Any]] = {}
            for key, value in values:
                rows.setdefault(key, []).append(value)
            out[component] = {
                "topic": topic,
                "records": len(values),
                "rows": {
                    k: sorted(v, key=lambda x: json.dumps(x, sort_keys=True))
                    for k, v in sorted(rows.items())
                },
            }
        return out

    def _ensure(self, topic: str, like: str) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415
        from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        metadata = admin.list_topics(timeout=_TIMEOUT_S)
        if topic not in metadata.topics:
            source = metadata.topics.get(like)
            partitions = len(source.partitions) if source is not None else 1
            replicas = min(3, len(metadata.brokers))
            futures = admin.create_topics([NewTopic(topic, partitions, replicas)])
            for future in futures.values():
                future.result(_TIMEOUT_S)
            _wait_for_partitions(admin, topic, partitions)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": _group()})
        try:
            parts = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics[topic]
            return {
                p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=_TIMEOUT_S
                )[1]
                for p in parts.partitions
            }
        finally:
            consumer.close()

    def _records(self, topic: str, starts: Mapping[int, int]) -> list[tuple[str, Any]]:
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": _group(),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            meta = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics[topic]
            ends = {
                p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=_TIMEOUT_S
                )[1]
                for p in meta.partitions
            }
            todo = [p for p in meta.partitions if ends[p] > starts.get(p, 0)]
            consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in todo])
            found: list[tuple[str, Any]] = []
            deadline = time.monotonic() + _TIMEOUT_S
            while todo:
                for message in consumer.consume(1000, 0.2):
                    if message.error() is None:
                        key = message.key()
                        found.append(
                            (
                                key.decode() if key is not None else _NO_KEY,
                                _decoded(message.value() or b""),
                            )
                        )
                positions = consumer.position([TopicPartition(topic, p) for p in todo])
                todo = [
                    tp.partition for tp in positions if tp.offset < ends[tp.partition]
                ]
                if todo and time.monotonic() > deadline:
                    msg = (
                        f"sr3 compare: {topic} was not read to its end within "
                        f"{_TIMEOUT_S} s (partitions {todo}); is an open "
                        "transaction holding read_committed back?"
                    )
                    raise ConfigError(msg)
            return found
        finally:
            consumer.close()


def sink_topics(topology: LoadedTopology, conf: Mapping[str, Any]) -> SinkTopics | None:
    """Return the topology's ``KafkaSink`` topics for ``sr3 compare`` (None: none).

    Each engine gets its own topic unless ``conf`` names the sink topic (all
    write it then, as before) or the sinks write several topics (a conf key
    cannot give each its own).
    """
    base: dict[str, str] = {}
    bootstrap = ""
    for name, spec in topology.components.items():
        if spec.kind == "bolt" and is_kafka_sink(spec.component_cls):
            component = storm_conf(topology, name, conf)
            topic = component.get(SINK_TOPIC_KEY)
            bootstrap = str(component.get("sr3.kafka.bootstrap") or bootstrap)
            if topic:
                base[name] = str(topic)
    if not base or not bootstrap:
        return None
    per_engine = SINK_TOPIC_KEY not in conf and len(set(base.values())) == 1
    if per_engine and len(base) > 1:
        base = dict(list(base.items())[:1])  # several sinks, one topic: read once
    return SinkTopics(bootstrap, base, per_engine)


def _wait_for_partitions(admin: Any, topic: str, partitions: int) -> None:
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None:
            if len(meta.partitions) == partitions:
                return
        time.sleep(0.2)  # metadata propagation, bounded by the deadline
    msg = f"sr3 compare: topic {topic} not visible within {_TIMEOUT_S} s"
    raise ConfigError(msg)


def _group() -> str:
    return f"sr3-compare-{uuid.uuid4().hex}"


def _decoded(value: bytes) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value.decode("utf-8", errors="replace")
