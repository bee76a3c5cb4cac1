"""Who writes a Kafka sink's outputs: transactional ids and delivering an owner.

A sink's outputs are written by its owners: each Storm sink task, and on the
Spark engine the driver (owner ``<topology>/<component>/spark``). Both engines
name a writer's Kafka ``transactional.id`` here, so the id that fences a dead
writer is the one it wrote with, whichever engine ran it.
"""

from __future__ import annotations

from typing import Any, Final

from topology_api.kafka.delivery import EpochDelivery, Marker, snapshot_outputs
from topology_api.kafka.settings import SinkSettings

__all__ = [
    "RESTORE_MECHANISM",
    "SPARK_WRITER",
    "deliver_owner",
    "transactional_id",
]

#: Last part of the owner of a sink's outputs the Spark driver writes.
SPARK_WRITER: Final = "spark"
#: How a writer reads its snapshot back: a sink's state is its pending outputs.
RESTORE_MECHANISM: Final = "star"


def transactional_id(topology: str, component: str, index: int | str) -> str:
    """Return the Kafka ``transactional.id`` of a sink writer (stable across restarts).

    ``index`` is the Storm task's index, or :data:`SPARK_WRITER` for the Spark
    driver, which writes a sink component's outputs on the Spark engine.
    """
    return f"sr3-{topology}-{component}-{index}"


def deliver_owner(
    settings: SinkSettings, *, ring: Any, record: Any, owner: str, tid: str
) -> Marker:
    """Deliver the outputs one sink owner left pending in committed ``record``.

    The owner's snapshot at ``record``'s epoch is read back from the ring and
    its outputs above the marker of ``tid`` are written (idempotent). A Storm
    sink task is one owner; on Spark, the driver's write-ahead of a sink
    component is another (``<topology>/<component>/spark``).

    Returns:
        The owner's marker after delivery (read back only, when ``record``
        does not name the owner).

    Raises:
        KafkaException: Kafka failed.
        SR3Error: ZooKeeper or the ring failed.
    """
    delivery = EpochDelivery(settings=settings, owner=owner, transactional_id=tid)
    try:
        if record is None or owner not in record.owners:
            return delivery.read_marker()
        groups = int(ring.manifests.manifest(owner, record.epoch).key_group_count)
        state, _report = ring.restorer.restore(
            owner, record, key_group_count=groups, mechanism=RESTORE_MECHANISM
        )
        return delivery.deliver(record.epoch, snapshot_outputs(state.items()))
    finally:
        delivery.close()
