"""Delivering a sink task's committed outputs to Kafka, once per committed epoch.

A :class:`~storm_bridge.kafka.KafkaSink` keeps every output in its keyed state
until Kafka has it, so the outputs of epoch ``e`` are part of ``e``'s snapshot
on the ring (a write-ahead log, as in Flink's ``GenericWriteAheadSink``). Once
``e`` commits, :class:`EpochDelivery` reads that snapshot back and writes the
outputs not yet delivered, plus a marker ``{epoch, run, seq}`` keyed by the task,
in ONE Kafka transaction: a ``read_committed`` consumer sees both or neither. A
task that restarts (or a producer whose commit outcome is unknown) reads the
last marker back first, so no output is written twice and none is skipped.
With ``at-least-once`` the same happens without a transaction: the marker
follows the outputs, and a crash between the two writes the epoch again.

Outputs are numbered ``(run, seq)``: ``seq`` counts a task's outputs and
``run`` is a random id drawn when its state started empty (and kept in the state
from then on), so a fresh run of the topology, whose numbers restart at 0, is
never mistaken for the older run whose marker is still in Kafka.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sr3.errors import SR3Error
from topology_api.kafka.settings import EXACTLY_ONCE, SinkSettings

__all__ = [
    "NEXT_KEY",
    "fence_writers",
    "OUT_KEY",
    "DeliveryThread",
    "EpochDelivery",
    "NO_MARKER",
    "Marker",
    "Snapshot",
    "encode_record",
    "snapshot_outputs",
]

logger = logging.getLogger(__name__)

#: First element of the state key of a pending output, ``(OUT_KEY, seq)``.
OUT_KEY: Final = "sr3.kafka.out"
#: State key of the output counter: fields ``n`` (next seq) and ``r`` (run).
NEXT_KEY: Final = ("sr3.kafka.next",)
_TIMEOUT_S: Final = 30.0
_RETRY_S: Final = 0.5
_WARN_EVERY_S: Final = 10.0


@dataclass(frozen=True)
class Marker:
    """What a sink task delivered last: the epoch and its highest output number."""

    epoch: int
    run: str
    seq: int

    def covers(self, run: str, seq: int) -> bool:
        """Whether output ``(run, seq)`` was delivered."""
        return run == self.run and seq <= self.seq


#: No marker in Kafka yet.
NO_MARKER: Final = Marker(0, "", -1)


@dataclass(frozen=True)
class Snapshot:
    """The outputs a sink task's snapshot holds: its run and ``(seq, fields)``."""

    run: str
    outputs: list[tuple[int, Mapping[str, Any]]]


class EpochDelivery:
    """Writes one sink task's committed outputs to Kafka (see the module doc).

    Args:
        settings: The sink's settings.
        owner: The task's owner id, ``topology/component/index``.
        transactional_id: Stable per task, so a restarted task fences the old one.
    """

    def __init__(
        self, *, settings: SinkSettings, owner: str, transactional_id: str
    ) -> None:
        self._settings = settings
        self._owner = owner
        self._tid = transactional_id
        self._producer: Producer | None = None
        self.marker: Marker | None = None
        self._warned_at = 0.0

    @property
    def transactional(self) -> bool:
        """Whether outputs go out in Kafka transactions (``exactly-once``)."""
        return self._settings.guarantee == EXACTLY_ONCE

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the broker)."""
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None

    def deliver(self, epoch: int, snapshot: Snapshot) -> Marker:
        """Write the outputs of committed ``epoch`` numbered above the marker.

        Args:
            epoch: The committed epoch the outputs come from.
            snapshot: The task's outputs in that epoch's snapshot.

        Returns:
            The marker now in Kafka.

        Raises:
            KafkaException: Kafka refused (the caller retries; the next attempt
                reads the marker back first).
        """
        self._ready()
        marker = self.marker or NO_MARKER
        run = snapshot.run
        todo = [(s, f) for s, f in snapshot.outputs if not marker.covers(run, s)]
        if epoch <= marker.epoch and not todo:
            return marker
        if todo:
            done = Marker(max(epoch, marker.epoch), run, todo[-1][0])
        else:
            done = Marker(max(epoch, marker.epoch), marker.run, marker.seq)
        producer = self._producer
        if producer is None:  # _ready() made one
            return marker
        try:
            if self.transactional:
                producer.begin_transaction()
            for _seq, fields in todo:
                producer.produce(
                    self._settings.topic, value=fields.get("v"), key=fields.get("k")
                )
                producer.poll(0)
            if not self.transactional:
                self._flush(producer)
            body = json.dumps(
                {
                    "epoch": done.epoch,
                    "run": done.run,
                    "seq": done.seq,
                    "owner": self._owner,
                }
            )
            producer.produce(self._settings.marker_topic, key=self._tid, value=body)
            if self.transactional:
                producer.commit_transaction(_TIMEOUT_S)
            else:
                self._flush(producer)
        except KafkaException:
            # the outcome may be unknown: a fresh producer re-reads the marker
            self._producer = None
            self.marker = None
            raise
        self.marker = done
        return done

    def _flush(self, producer: Producer) -> None:
        if producer.flush(_TIMEOUT_S):
            msg = (
                f"sink {self._owner}: Kafka at {self._settings.bootstrap} did not "
                f"acknowledge writes to {self._settings.topic} within {_TIMEOUT_S} s"
            )
            raise KafkaException(msg)

    def _ready(self) -> None:
        """Make the producer (fencing older ones) and read the marker back."""
        if self._producer is not None and self.marker is not None:
            return
        config: dict[str, Any] = {
            "bootstrap.servers": self._settings.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "logger": logger,
        }
        if self.transactional:
            config["transactional.id"] = self._tid
            config["transaction.timeout.ms"] = 60_000
        producer = Producer(config)
        if self.transactional:
            # fences an older producer of this task and settles its transaction
            producer.init_transactions(_TIMEOUT_S)
        self._producer = producer
        self.marker = self.read_marker()

    def read_marker(self) -> Marker:
        """Return this task's last marker in Kafka (:data:`NO_MARKER`: none).

        Creates the marker topic when it is missing.

        Raises:
            KafkaException: Kafka did not answer.
        """
        self._ensure_marker_topic()
        consumer = Consumer(
            {
                "bootstrap.servers": self._settings.bootstrap,
                "group.id": f"sr3-marker-{self._tid}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": logger,
            }
        )
        found = NO_MARKER
        try:
            partition = TopicPartition(self._settings.marker_topic, 0)
            _low, high = consumer.get_watermark_offsets(partition, timeout=_TIMEOUT_S)
            if high <= 0:
                return found
            consumer.assign(
                [TopicPartition(self._settings.marker_topic, 0, OFFSET_BEGINNING)]
            )
            deadline = time.monotonic() + _TIMEOUT_S
            while True:
                for message in consumer.consume(500, 0.2):
                    if message.error() is None and message.key() == self._tid.encode():
                        raw = json.loads(message.value() or b"{}")
                        found = Marker(
                            int(raw["epoch"]), str(raw["run"]), int(raw["seq"])
                        )
                position = consumer.position([partition])[0].offset
                if position >= high:
                    return found
                if time.monotonic() > deadline:
                    msg = (
                        f"sink {self._owner}: reading marker topic "
                        f"{self._settings.marker_topic} stopped at offset {position} "
                        f"of {high} for {_TIMEOUT_S} s (an open transaction?)"
                    )
                    raise KafkaException(msg)
        finally:
            consumer.close()

    def _ensure_marker_topic(self) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": self._settings.bootstrap,
            "logger": logger,
        }
        admin = AdminClient(config)
        metadata = admin.list_topics(timeout=_TIMEOUT_S)
        topic = self._settings.marker_topic
        if topic in metadata.topics and metadata.topics[topic].error is None:
            return
        replicas = min(3, len(metadata.brokers))
        futures = admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=1,
                    replication_factor=replicas,
                    config={"cleanup.policy": "compact"},
                )
            ]
        )
        for future in futures.values():
            try:
                future.result(_TIMEOUT_S)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        logger.info("created marker topic %s", topic)

    def warn(self, fmt: str, *args: Any) -> None:
        """Log a warning at most every 10 s (Kafka away)."""
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            logger.warning("sink %s: " + fmt, self._owner, *args)


def encode_record(
    names: Sequence[str], values: Sequence[Any], key_field: str | None
) -> tuple[bytes | None, bytes]:
    """Return the Kafka ``(key, value)`` of a sink input, on either engine.

    The value is the compact JSON object of the input's fields (``{"word":
    "a","count":3}``); the key the UTF-8 text of ``key_field``'s value (JSON
    for a value that is not a string), or None without ``key_field``.
    """
    row = dict(zip(names, values, strict=False))
    value = json.dumps(row, separators=(",", ":")).encode()
    if key_field is None:
        return None, value
    raw = row.get(key_field)
    key = raw if isinstance(raw, str) else json.dumps(raw)
    return key.encode(), value


def snapshot_outputs(
    items: Iterable[tuple[tuple[Any, ...], Mapping[str, Any]]],
) -> Snapshot:
    """Return the run and the pending outputs among a sink task's state items."""
    run = ""
    outputs: list[tuple[int, Mapping[str, Any]]] = []
    for key, fields in items:
        if key == NEXT_KEY:
            run = str(fields.get("r") or "")
        elif len(key) == 2 and key[0] == OUT_KEY:  # noqa: PLR2004 (OUT_KEY, seq)
            outputs.append((int(key[1]), fields))
    return Snapshot(run, sorted(outputs, key=lambda o: o[0]))


class DeliveryThread:
    """Delivers each newly committed epoch of one sink task (a daemon thread).

    Args:
        delivery: Writes to Kafka.
        committed: Returns the topology's committed record (None: none yet).
        restore: Returns the task's keyed state items at a committed record.
        owner: The task's owner id.
        on_delivered: Called with the marker after each delivery.
        poll_s: Time between two reads of the committed record.
    """

    def __init__(  # noqa: PLR0913 (the collaborators, injectable for tests)
        self,
        *,
        delivery: EpochDelivery,
        committed: Callable[[], Any],
        restore: Callable[[Any], Iterable[tuple[tuple[Any, ...], Mapping[str, Any]]]],
        owner: str,
        on_delivered: Callable[[Marker], None],
        poll_s: float,
    ) -> None:
        self._delivery = delivery
        self._committed = committed
        self._restore = restore
        self._owner = owner
        self._on_delivered = on_delivered
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._handled = -1
        self._thread = threading.Thread(
            target=self._loop, name="sr3-kafka-sink", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next poll."""
        self._stop.set()

    def step(self) -> bool:
        """Deliver the committed epoch if it is new; return whether it was handled.

        Raises:
            KafkaException, SR3Error: Kafka, ZooKeeper or the ring failed.
        """
        record = self._committed()
        if record is None or record.epoch <= self._handled:
            return True
        if self._owner in record.owners:
            marker = self._delivery.deliver(
                record.epoch, snapshot_outputs(self._restore(record))
            )
            self._on_delivered(marker)
        self._handled = record.epoch
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.step()
            except (KafkaException, SR3Error) as exc:
                self._delivery.warn("delivery postponed: %s", exc)
                self._stop.wait(_RETRY_S)
            except Exception:
                logger.exception("sink %s: delivery failed; retrying", self._owner)
                self._stop.wait(_RETRY_S)


def fence_writers(settings: SinkSettings, tids: Sequence[str]) -> None:
    """Fence every writer of a sink and settle its open transaction, first.

    Each sink task reads its marker with ``read_committed`` from one shared
    marker partition: another task's transaction left open (its process
    stopped mid-transaction, or its coordinator's broker died) would hold
    every reader below it until the transaction times out. Fencing all of
    them before any marker is read aborts those transactions at once.

    Raises:
        KafkaException: Kafka did not answer.
    """
    if settings.guarantee != EXACTLY_ONCE:
        return
    for tid in tids:
        producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap,
                "enable.idempotence": True,
                "transactional.id": tid,
                "logger": logger,
            }
        )
        producer.init_transactions(_TIMEOUT_S)
