"""``KafkaSink``: a bolt whose outputs reach Kafka exactly once, when epochs commit.

Each input becomes one record for ``sr3.kafka.sink.topic``. The record is
first kept in the task's keyed state (key ``(OUT_KEY, seq)``, one per output),
so it is part of the epoch's snapshot; once the epoch commits, a delivery
thread writes the epoch's outputs and a marker in one Kafka transaction
(:mod:`topology_api.kafka.delivery`). Outputs thus become visible to
``read_committed`` consumers one checkpoint interval (plus the commit and the
transaction) after they were produced, and exactly once across task kills,
ring-node kills and rollbacks: a rolled-back epoch never committed, so its
outputs were never written, and its replay writes them in a later epoch.

The bolt learns that an epoch committed by reading the topology's commit record
in ZooKeeper (the same record in both checkpoint modes), and what the epoch
holds by reading its own committed snapshot back from the ring.
"""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from confluent_kafka import Producer
from pystorm.component import Tuple as StormTuple

from backend.owners import owner_name, writer_name
from sr3.state import KeyState
from storm_bridge.stateful import StatefulBolt
from topology_api.barriers import task_index
from topology_api.kafka.delivery import (
    NEXT_KEY,
    OUT_KEY,
    DeliveryThread,
    EpochDelivery,
    Marker,
    encode_record,
    fence_writers,
    snapshot_outputs,
)
from topology_api.kafka.settings import SinkSettings
from topology_api.kafka.writers import (
    RESTORE_MECHANISM,
    SPARK_WRITER,
    deliver_owner,
    transactional_id,
)

__all__ = [
    "KafkaSink",
    "deliver_committed",
    "deliver_spark_writer",
]

logger = logging.getLogger(__name__)


class KafkaSink(StatefulBolt):
    """Write each input tuple to a Kafka topic, visible when its epoch commits.

    Storm conf: ``sr3.kafka.bootstrap``, ``sr3.kafka.sink.topic`` and the
    optional keys of :class:`~topology_api.kafka.settings.SinkSettings`. By
    default a record's value is the JSON object of the input's fields and its
    key the value of ``sr3.kafka.sink.key.field``; override :meth:`record`.
    Without a ring (``sr3.zk.hosts`` unset, no checkpoints) records are written
    at once, with no guarantee beyond Kafka's idempotent producer.

    The sink's parallelism stays the same across runs that resume (its
    pending outputs are per task, like Kafka transactional ids): a resume or a
    rebalance at another task count is refused (``sr3_fixed_parallelism``).
    """

    outputs: ClassVar[list[Any]] = []
    sr3_fixed_parallelism: ClassVar[str | None] = (
        "a KafkaSink keeps its pending outputs, output numbers and Kafka "
        "transactional ids per task, not per key"
    )

    @classmethod
    def deliver_stopped(
        cls, conf: Mapping[str, Any], *, ring: Any, component: str, tasks: int
    ) -> None:
        """Deliver what the stopped tasks of ``component`` left (after a run).

        ``sr3 run`` calls this once a run's tasks stopped: see
        :func:`deliver_committed`.
        """
        deliver_committed(conf, ring=ring, component=component, tasks=tasks)

    def initialize(self, stormconf: Any, context: Any) -> None:
        """Read the settings, find the next output number, start delivering."""
        self._settings = SinkSettings.from_conf(stormconf)
        index, _count = task_index(context)
        component = str(context["componentid"])
        topology = str(stormconf.get("topology.name", ""))
        self._owner_id = owner_name(topology, component, index)
        self._fields: dict[tuple[str, str], list[str]] = {
            (source, stream): list(names)
            for source, streams in context.get("source->stream->fields", {}).items()
            for stream, names in streams.items()
        }
        self._delivered = -1
        counter = self._sync()
        self._direct: Producer | None = None
        self._thread: DeliveryThread | None = None
        ring = None
        if stormconf.get("sr3.zk.hosts"):
            from storm_bridge.wiring import RingAccess  # noqa: PLC0415 - ring on demand

            ring = RingAccess.from_conf(stormconf)
        if not counter.get("r"):
            # a state that starts empty starts a run: a new id, so a marker an
            # older run left in Kafka never hides its outputs
            counter["r"] = uuid.uuid4().hex
        self._out_run = str(counter["r"])
        if ring is None:
            self._direct = Producer(
                {
                    "bootstrap.servers": self._settings.bootstrap,
                    "enable.idempotence": True,
                    "logger": logger,
                }
            )
            return
        if index == 0:
            # a Spark driver that died between its epoch's commit and its Kafka
            # transaction left that batch's outputs in the epoch: task 0 writes
            # them on every Storm engine (real Storm too, where nothing runs
            # before the tasks), fencing the driver's transactional id
            deliver_spark_writer(
                self._settings, ring=ring, topology=topology, component=component
            )
        self._thread = _delivery_thread(
            ring,
            settings=self._settings,
            owner=self._owner_id,
            tid=transactional_id(topology, component, index),
            key_groups=self.keyed_state.key_group_count,
            on_delivered=self._set_delivered,
        )
        self._thread.start()

    def _sync(self) -> KeyState:
        """Read the output counter and pending outputs from the keyed state.

        Runs at start and after a native-mode rollback replaced the state.
        """
        self._known = self.keyed_state
        snapshot = snapshot_outputs(self.keyed_state.items())
        counter = self.keyed_state.for_key(NEXT_KEY)
        self._next = max(
            [int(counter.get("n", 0) or 0), *(s + 1 for s, _ in snapshot.outputs)]
        )
        self._live: collections.deque[int] = collections.deque(
            s for s, _ in snapshot.outputs
        )
        return counter

    def _set_delivered(self, marker: Marker) -> None:
        # called on the delivery thread; process() trims on the task's thread
        if marker.run == self._out_run:
            self._delivered = max(self._delivered, marker.seq)

    def state_key(self, tup: StormTuple) -> tuple[Any, ...]:
        """Return the key the output of ``tup`` is kept under: ``(OUT_KEY, seq)``."""
        if self.keyed_state is not self._known:
            self._sync()  # a native-mode rollback restored the committed state
        return (OUT_KEY, self._next)

    def process(self, tup: StormTuple) -> None:
        """Keep the record of ``tup`` until its epoch commits (or write it now)."""
        key, value = self.record(tup)
        if self._direct is not None:
            self._direct.produce(self._settings.topic, value=value, key=key)
            self._direct.poll(0)
            return
        self._trim()
        self.state["k"] = key
        self.state["v"] = value
        self._live.append(self._next)
        self._next += 1
        self.keyed_state.for_key(NEXT_KEY)["n"] = self._next

    def record(self, tup: StormTuple) -> tuple[bytes | None, bytes]:
        """Return the Kafka ``(key, value)`` of an input tuple.

        The value is the JSON object of the tuple's fields (``{"word": "a",
        "count": 3}``); the key the UTF-8 text of ``sr3.kafka.sink.key.field``'s
        value (or None).
        """
        names = self._fields.get((tup.component, tup.stream)) or [
            f"f{i}" for i in range(len(tup.values))
        ]
        return encode_record(names, tup.values, self._settings.key_field)

    def _trim(self) -> None:
        """Forget outputs Kafka has (the next snapshot no longer holds them)."""
        delivered = self._delivered
        live = self._live
        while live and live[0] <= delivered:
            self.keyed_state.for_key((OUT_KEY, live.popleft())).clear()


def _delivery_thread(  # noqa: PLR0913 (what one task's delivery needs)
    ring: Any,
    *,
    settings: SinkSettings,
    owner: str,
    tid: str,
    key_groups: int,
    on_delivered: Callable[[Marker], None],
) -> DeliveryThread:
    topology = owner.split("/", 1)[0]

    def restore(record: Any) -> Iterable[tuple[tuple[Any, ...], Mapping[str, Any]]]:
        state, _report = ring.restorer.restore(
            owner, record, key_group_count=key_groups, mechanism=RESTORE_MECHANISM
        )
        return list(state.items())

    return DeliveryThread(
        delivery=EpochDelivery(settings=settings, owner=owner, transactional_id=tid),
        committed=lambda: ring.committed(topology),
        restore=restore,
        owner=owner,
        on_delivered=on_delivered,
        poll_s=settings.poll_s,
    )


def deliver_committed(
    conf: Mapping[str, Any], *, ring: Any, component: str, tasks: int
) -> list[Marker]:
    """Deliver what a stopped topology's sink tasks left pending (idempotent).

    A run that ends right after its last commit may stop the sink tasks before
    they wrote that epoch; a restarted task would write it. This does the same
    from outside, with the tasks' transactional ids (so it fences them: call it
    only once they stopped). Outputs a Spark run's driver left in the epoch
    (owner ``<topology>/<component>/spark``) are written too, with its id.

    Args:
        conf: The topology's Storm conf (``sr3.kafka.*`` and ``topology.name``).
        ring: A :class:`~storm_bridge.wiring.RingAccess`.
        component: The sink component.
        tasks: Its parallelism.

    Returns:
        Each task's marker after delivery.

    Raises:
        KafkaException: Kafka failed.
        SR3Error: ZooKeeper or the ring failed.
    """
    settings = SinkSettings.from_conf(conf)
    topology = str(conf["topology.name"])
    record = ring.committed(topology)
    writers: list[int | str] = list(range(tasks))
    if _names_spark_writer(record, topology, component):
        writers.append(SPARK_WRITER)
    fence_writers(settings, [transactional_id(topology, component, w) for w in writers])
    return [
        deliver_owner(
            settings,
            ring=ring,
            record=record,
            owner=writer_name(topology, component, str(writer)),
            tid=transactional_id(topology, component, writer),
        )
        for writer in writers
    ]


def deliver_spark_writer(
    settings: SinkSettings, *, ring: Any, topology: str, component: str
) -> Marker | None:
    """Write the outputs a Spark driver left in the committed epoch (idempotent).

    A driver SIGKILLed after a micro-batch's epoch committed and before its
    Kafka transaction left them under ``<topology>/<component>/spark``; the
    Storm run that takes over writes them with the driver's transactional id,
    which fences the driver (it must have stopped: engines hand off).

    Returns:
        The driver's marker after delivery; None when the committed epoch
        holds nothing of a Spark driver.

    Raises:
        KafkaException: Kafka failed.
        SR3Error: ZooKeeper or the ring failed.
    """
    record = ring.committed(topology)
    if not _names_spark_writer(record, topology, component):
        return None
    tid = transactional_id(topology, component, SPARK_WRITER)
    fence_writers(settings, [tid])
    owner = writer_name(topology, component, SPARK_WRITER)
    return deliver_owner(settings, ring=ring, record=record, owner=owner, tid=tid)


def _names_spark_writer(record: Any, topology: str, component: str) -> bool:
    """Whether committed ``record`` holds outputs of a Spark run's driver."""
    owner = writer_name(topology, component, SPARK_WRITER)
    return record is not None and owner in record.owners
