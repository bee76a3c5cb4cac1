"""A ``KafkaSink`` on Spark: a committed micro-batch's outputs in one Kafka transaction.

On Spark a ``KafkaSink`` component is not hosted as a bolt. The compiler
drops it from the plan (:attr:`spark_bridge.compiler.Plan.kafka_sinks`), so
the emits it subscribes to reach the query's sink as outputs; there, after a
micro-batch is written (parquet) and committed as an SR3 epoch, the batch's
emits of those streams are written to ``sr3.kafka.sink.topic`` with
:class:`topology_api.kafka.delivery.EpochDelivery`, the Storm engine's code:
the records and a marker ``{epoch, run, seq}`` in ONE Kafka transaction, so a
``read_committed`` consumer sees each output once, when its epoch committed.

With a ring, the batch's outputs are also part of its SR3 epoch, as a Storm
sink task keeps them in its state: the owner ``<topology>/<component>/spark``
holds them (:meth:`SparkKafkaSink.pending`, in the Storm sink's key layout)
until the next batch's epoch replaces them. A driver that dies between the
epoch's commit and the Kafka transaction thus leaves them in the committed
epoch, and the next start writes them (:func:`deliver_pending`, with the
engines' :func:`~topology_api.kafka.writers.deliver_owner`), whether it
resumes from the Spark checkpoint or from the ring with a fresh one. Without a
ring, the micro-batch's parquet rows are the only write-ahead log: Spark
re-runs a batch it did not commit with the same rows. Either way the marker
(read back by a fresh producer) skips what Kafka already has. An output is
numbered ``(batch id << 32) + its rank`` in the batch (rows sorted by
``seq``), under the run id of the Spark checkpoint (its query id): a batch
re-run gets the same numbers, a new checkpoint a new run. The transactional
id is ``sr3-<topology>-<component>-spark``, one per sink component (the driver
writes), distinct from the Storm tasks' ``sr3-<topology>-<component>-<index>``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaException

from backend.owners import writer_name
from spark_bridge.context import storm_context
from spark_bridge.rows import EMIT
from sr3.codec import decode_value, encode_key
from topology_api.kafka.delivery import (
    NEXT_KEY,
    OUT_KEY,
    EpochDelivery,
    Marker,
    Snapshot,
    encode_record,
)
from topology_api.kafka.settings import SinkSettings
from topology_api.kafka.writers import SPARK_WRITER, deliver_owner, transactional_id
from topology_api.topology import LoadedTopology

__all__ = [
    "CRASH_ENV",
    "SparkKafkaSink",
    "deliver_pending",
    "is_kafka_sink",
    "spark_transactional_id",
]

#: Test-only switch: ``after-commit:<batch>`` SIGKILLs the driver once micro-batch
#: ``<batch>`` committed its epoch, before its Kafka transaction
#: (``tests/integration/kafka/test_spark_kafka_crash.py``).
CRASH_ENV: Final = "SR3_CRASH_POINT"
_SEQ_SHIFT: Final = 32
_RETRY_FOR_S: Final = 60.0
_RETRY_S: Final = 0.5


def is_kafka_sink(cls: type) -> bool:
    """Whether ``cls`` is a ``KafkaSink`` (found by name: nothing is imported)."""
    return any(
        c.__name__ == "KafkaSink" and c.__module__ == "storm_bridge.kafka.sink"
        for c in cls.__mro__
    )


def overrides_record(cls: type) -> bool:
    """Whether a ``KafkaSink`` subclass overrides ``record`` (Spark cannot call it)."""
    for klass in cls.__mro__:
        if klass.__module__ == "storm_bridge.kafka.sink" and klass.__name__ == (
            "KafkaSink"
        ):
            return False
        if "record" in vars(klass):
            return True
    return False


def spark_transactional_id(topology: str, component: str) -> str:
    """Return the ``transactional.id`` the Spark driver writes a sink's outputs with."""
    return transactional_id(topology, component, SPARK_WRITER)


def crash_point(batch: int) -> None:
    """SIGKILL this driver if :data:`CRASH_ENV` asks for it at ``batch`` (tests)."""
    if os.environ.get(CRASH_ENV) == f"after-commit:{batch}":
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class SparkKafkaSink:
    """Writes one ``KafkaSink`` component's outputs of committed micro-batches.

    Args:
        component: The sink component.
        fields: ``{(source, stream): field names}`` of its inputs.
        settings: Its settings.
        delivery: The transactional writer (marker per component).
        run: The run id (the Spark checkpoint's query id).
        owner: The ring owner its pending outputs are kept under.
    """

    component: str
    fields: dict[tuple[str, str], list[str]]
    settings: SinkSettings
    delivery: EpochDelivery
    run: str
    owner: str

    @classmethod
    def of(
        cls,
        topology: LoadedTopology,
        component: str,
        overrides: dict[str, Any],
        *,
        run: str,
    ) -> SparkKafkaSink:
        """Build the sink of ``component`` from its Storm conf and context.

        Raises:
            ConfigError: its ``sr3.kafka.*`` settings are invalid.
        """
        from spark_bridge.context import storm_conf  # noqa: PLC0415 (one use)

        settings = SinkSettings.from_conf(storm_conf(topology, component, overrides))
        context = storm_context(topology, component, 0, overrides)
        inputs = {
            (sub.source, sub.stream) for sub in topology.components[component].inputs
        }
        fields = {
            (source, stream): [str(n) for n in names]
            for source, streams in context.get("source->stream->fields", {}).items()
            for stream, names in streams.items()
            if (source, stream) in inputs
        }
        owner = writer_name(topology.name, component, SPARK_WRITER)
        delivery = EpochDelivery(
            settings=settings,
            owner=owner,
            transactional_id=spark_transactional_id(topology.name, component),
        )
        return cls(component, fields, settings, delivery, run, owner)

    def outputs(
        self, directory: Path, batch: int
    ) -> list[tuple[int, Mapping[str, Any]]]:
        """Return the batch's records for Kafka, numbered (see the module doc)."""
        sources = sorted({source for source, _stream in self.fields})
        rows: list[tuple[str, str, str, bytes]] = []
        for part in sorted(directory.glob("*.parquet")):
            table = pq.read_table(
                part, columns=["component", "stream", "kind", "values", "seq"]
            )
            table = table.filter(
                (pc.field("kind") == EMIT) & pc.field("component").isin(sources)
            )
            for row in table.to_pylist():
                if (row["component"], row["stream"]) in self.fields:
                    rows.append(
                        (
                            row["seq"] or "",
                            row["component"],
                            row["stream"],
                            row["values"],
                        )
                    )
        rows.sort()
        out: list[tuple[int, Mapping[str, Any]]] = []
        for rank, (_seq, source, stream, blob) in enumerate(rows):
            key, value = encode_record(
                self.fields[(source, stream)],
                list(decode_value(blob)),
                self.settings.key_field,
            )
            out.append(((batch << _SEQ_SHIFT) + rank, {"k": key, "v": value}))
        return out

    def pending(self, outputs: list[tuple[int, Mapping[str, Any]]]) -> dict[bytes, Any]:
        """Return the owner's state holding ``outputs``, as a Storm sink task's.

        ``{encoded key: fields}``: the run and next number under ``NEXT_KEY``,
        each output under ``(OUT_KEY, seq)``, what
        :func:`~topology_api.kafka.delivery.snapshot_outputs` reads back.
        """
        state: dict[bytes, Any] = {
            encode_key((OUT_KEY, seq)): dict(fields) for seq, fields in outputs
        }
        following = outputs[-1][0] + 1 if outputs else 0
        state[encode_key(NEXT_KEY)] = {"r": self.run, "n": following}
        return state

    def deliver(
        self,
        batch: int,
        epoch: int,
        directory: Path,
        outputs: list[tuple[int, Mapping[str, Any]]] | None = None,
    ) -> Marker | None:
        """Write micro-batch ``batch`` (committed as ``epoch``) unless Kafka has it.

        ``outputs`` are the batch's (default: read from ``directory``).

        Returns:
            The marker now in Kafka (None: the batch had no output).

        Raises:
            KafkaException: Kafka refused for 60 s (the query fails; a run from
                the same checkpoint runs the batch again and delivers it).
        """
        if outputs is None:
            outputs = self.outputs(directory, batch)
        if not outputs:
            return None
        snapshot = Snapshot(self.run, outputs)
        deadline = time.monotonic() + _RETRY_FOR_S
        while True:
            try:
                return self.delivery.deliver(epoch, snapshot)
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise
                # a fresh producer reads the marker back: nothing goes twice
                self.delivery.warn("delivery of batch %s postponed: %s", batch, exc)
                time.sleep(_RETRY_S)

    def close(self) -> None:
        """Drop the producer."""
        self.delivery.close()


def deliver_pending(
    topology: LoadedTopology,
    sinks: tuple[str, ...],
    overrides: dict[str, Any],
    *,
    ring: Any,
    record: Any,
) -> None:
    """Write what the committed epoch holds of the sinks' outputs, before a query.

    A Storm ``KafkaSink`` task keeps its outputs in its state until Kafka has
    them, and so does the Spark driver (owner ``<topology>/<component>/spark``);
    ``sr3 run`` writes the last epoch's once a run ended, but a run that died
    did not. Before a Spark query starts, every such owner in the committed
    ``record`` is delivered with its own transactional id (a Storm task's, or
    the Spark driver's), which fences its writer: call it only once that
    stopped. Idempotent: the markers skip what Kafka has.

    Raises:
        KafkaException: Kafka failed.
        SR3Error: ZooKeeper or the ring failed.
    """
    from spark_bridge.context import storm_conf  # noqa: PLC0415 (one use)

    for name in sinks:
        prefix = f"{topology.name}/{name}/"
        settings = SinkSettings.from_conf(storm_conf(topology, name, overrides))
        for owner in sorted(o for o in record.owners if o.startswith(prefix)):
            index = owner.removeprefix(prefix)
            if index == SPARK_WRITER:
                tid = transactional_id(topology.name, name, SPARK_WRITER)
            elif index.isdigit():
                tid = transactional_id(topology.name, name, int(index))
            else:
                continue
            deliver_owner(settings, ring=ring, record=record, owner=owner, tid=tid)
