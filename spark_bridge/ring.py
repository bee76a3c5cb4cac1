"""SR3 as the Spark engine's recovery core: ring writes per micro-batch, restore.

The ring layout is the Storm engine's, so either engine continues from the
other's committed epoch:

- owners are ``<topology>/<component>/<task index>``, one per task of each
  stateful bolt (:mod:`spark_bridge.ring_owners`); a key belongs to the task
  Storm's fields grouping sends it to
  (Java ``deepHashCode`` of the grouping values modulo the task count), which is
  the task whose Storm snapshot holds it: for a bolt overriding ``state_key``,
  by the route stored with the key's fields (:data:`sr3.key_state.ROUTE_FIELD`,
  :func:`topology_api.java_hash.key_task_index`);
- spout offsets are recorded by ``<spout>/<task index>``;
- a ``KafkaSink`` component's outputs of the batch are kept by one more owner,
  ``<topology>/<component>/spark``, written FULL every epoch (the batch's
  outputs only, :mod:`spark_bridge.kafka_sink`), as a Storm sink task keeps
  its pending outputs in its state;
- a commit record (``zk.checkpoints``) names the committed epoch, the offsets
  and every owner; the Spark engine adds ``{"engine": "spark", "query": id,
  "batch": n}``.

Driver side, :class:`BatchCommitter` runs inside ``foreachBatch``: micro-batch
``n``'s changed keys (its ``state`` rows) become, for every owner, a delta epoch
(an empty one when nothing of the owner changed, so every owner has a manifest
at every committed epoch), written through the ring with its write quorum; the
epoch is committed in ZooKeeper last, before Spark commits the batch. A batch
Spark runs again after a failure finds its batch id committed and writes
nothing. Deltas append to the last *committed* manifest, never to one a crashed
run published without committing. Every ``sr3.checkpoint.max.chain.length``
non-empty deltas the owner is compacted: its committed state is read back from
the ring, the batch's changes folded in, and a FULL epoch written; older epochs
and unreferenced shards are then collected in the background. How one owner's
epoch is written (delta, compaction, a rescaled component's rewrite) is
:mod:`spark_bridge.ring_writes`'s.

Executor side, the data source ``sr3_restore`` (:class:`RestoreSource`, in
:mod:`spark_bridge.restore`, re-exported here): when a
query starts on an empty Spark checkpoint, its first micro-batch reads one
partition per owner of the committed epoch; each partition restores its owner
through star, line or tree recovery (``sr3.recovery.mechanism`` of the
component) and yields ``restore`` rows, which the stateful stage installs into
Spark's state store, plus one ``info`` row carrying the restore's report.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from backend.access import RingAccess
from backend.chain import FULL, ChainPolicy, OwnerChain
from backend.committer import EpochCommitter, next_epoch
from backend.owners import component_owners
from spark_bridge.restore import RESTORE_SOURCE, RestoreSource, restore_options
from spark_bridge.ring_owners import Owner, stored_route
from spark_bridge.ring_writes import (
    resharded_state,
    write_outputs_epoch,
    write_owner_epoch,
)
from sr3.codec import decode_key
from sr3.manifest import Manifest
from topology_api.contract import overrides_state_key
from topology_api.java_hash import IntegerBoxing, key_task_index
from topology_api.topology import LoadedTopology
from zk.checkpoints import CommitRecord

__all__ = [
    "ENGINE",
    "RESTORE_SOURCE",
    "BatchCommit",
    "BatchCommitter",
    "RestoreSource",
    "restore_options",
]

#: ``engine`` recorded in commit records written by the Spark engine.
ENGINE: Final = "spark"


@dataclass
class BatchCommit:
    """What committing one micro-batch to the ring did.

    Attributes:
        batch: Spark's batch id.
        epoch: The SR3 epoch it committed (None: the batch was committed before).
        keys: Changed keys written.
        bytes_written: Payload bytes written (one replica).
        compacted: Owners compacted into a FULL epoch.
        seconds: Wall time of the ring writes and the commit.
    """

    batch: int
    epoch: int | None
    keys: int = 0
    bytes_written: int = 0
    compacted: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        return {
            "batch": self.batch,
            "epoch": self.epoch,
            "keys": self.keys,
            "bytes": self.bytes_written,
            "compacted": list(self.compacted),
            "seconds": round(self.seconds, 6),
        }


class BatchCommitter:
    """Writes each micro-batch's state changes to the ring and commits them.

    Args:
        access: Open handles on ZooKeeper and the ring (the driver's).
        topology: The loaded topology.
        owners: The stateful owners (:func:`stateful_owners`).
        query_id: Identity of the Spark checkpoint (its query id).
        policy: Non-empty deltas an owner's chain holds before it is compacted
            (:mod:`backend.chain`).
        boxing: How Storm's fields grouping hashes int keys, to place each key
            with the Storm task that owns it.
        retain: Committed epochs kept restorable (``sr3.checkpoint.retain``).
        outputs: Owners of the ``KafkaSink`` components' pending outputs.
    """

    def __init__(  # noqa: PLR0913 (the committer's collaborators)
        self,
        *,
        access: RingAccess,
        topology: LoadedTopology,
        owners: Sequence[Owner],
        query_id: str,
        policy: ChainPolicy | None = None,
        boxing: IntegerBoxing = IntegerBoxing.LONG,
        retain: int = 1,
        outputs: Sequence[str] = (),
    ) -> None:
        self._access = access
        self._outputs = tuple(outputs)
        self._policy = policy or ChainPolicy()
        self._topology = topology.name
        self._owners = {o.name: o for o in owners}
        self._by_component: dict[str, list[Owner]] = {}
        for owner in owners:
            self._by_component.setdefault(owner.component, []).append(owner)
        self._query = query_id
        self._boxing = boxing
        #: components whose keys carry their route (``state_key`` overridden)
        self._routed = frozenset(
            name
            for name in self._by_component
            if overrides_state_key(topology.components[name].component_cls)
        )
        self._bases: dict[str, Manifest | None] = {}
        self._chain: dict[str, OwnerChain] = {}
        self._offsets: dict[str, Any] = {}
        self._next_epoch = 0
        self._last_batch: int | None = None
        #: rescaled components: (committed epoch, owners it was committed with)
        self._reshard: dict[str, tuple[int, list[str]]] = {}
        self._committer = EpochCommitter(access, topology.name, retain=retain)
        self.commits: list[BatchCommit] = []

    def open(self) -> CommitRecord | None:
        """Read the committed epoch; number the next epoch above every published one.

        Returns:
            The committed record the query continues from (None: nothing yet).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        access = self._access
        record = access.committed(self._topology)
        self._next_epoch = next_epoch(access, self._topology)
        committed = set() if record is None else set(record.owners)
        self._reshard = {}
        for component, owners in self._by_component.items():
            before = component_owners(committed, self._topology, component)
            if record is not None and len(before) not in (0, len(owners)):
                # rescaled: the first batch rewrites every task's state in full
                self._reshard[component] = (record.epoch, before)
        for name, task in self._owners.items():
            base = None
            if (
                record is not None
                and name in committed
                and task.component not in self._reshard
            ):
                base = access.manifests.manifest(name, record.epoch)
            self._bases[name] = base
            chain = self._chain[name] = OwnerChain(self._policy)
            if base is not None:
                # the committed chain goes on; its earlier deltas are not
                # counted (each batch writes an empty delta for every owner,
                # which costs a restore nothing)
                chain.written(FULL)
        if record is not None:
            self._offsets = dict(record.offsets)
            extra = dict(record.extra)
            if extra.get("engine") == ENGINE and extra.get("query") == self._query:
                self._last_batch = int(extra.get("batch", -1))
        return record

    def commit(
        self,
        batch: int,
        changes: Mapping[str, Mapping[bytes, bytes | None]],
        offsets: Mapping[str, Any],
        pending: Mapping[str, Mapping[bytes, Any]] | None = None,
    ) -> BatchCommit:
        """Write one micro-batch's changes to the ring and commit its epoch.

        Args:
            batch: Spark's batch id.
            changes: ``{component: {encoded key: state blob, or None if deleted}}``.
            offsets: ``{"<spout>/<index>": offset}`` reached by this batch.
            pending: ``{output owner: {encoded key: fields}}``, the whole state
                of each owner of ``outputs`` at this epoch (missing: empty).

        Raises:
            QuorumError: a shard missed its write quorum (the batch fails and
                Spark runs it again).
            CoordinationError: ZooKeeper failed.
        """
        started = time.perf_counter()
        if self._last_batch is not None and batch <= self._last_batch:
            return BatchCommit(batch, None)
        epoch = self._next_epoch
        per_owner: dict[str, dict[bytes, bytes | None]] = {n: {} for n in self._owners}
        changed = 0
        for component, keys in changes.items():
            owners = self._by_component.get(component)
            if not owners:
                continue
            tasks = owners[0].tasks
            routed = component in self._routed
            changed += len(keys)
            for key, blob in keys.items():
                route = None
                if routed:
                    if blob is None:
                        # a deleted key's route went with its fields: no task
                        # keeps it (at most one has it)
                        for owner in owners:
                            per_owner[owner.name][key] = None
                        continue
                    route = stored_route(blob)
                index = key_task_index(decode_key(key), route, tasks, self._boxing)
                per_owner[owners[index].name][key] = blob
        offsets = {**self._offsets, **offsets}
        report = BatchCommit(batch, epoch, keys=changed)
        written: dict[str, Manifest] = {}
        full: dict[str, dict[bytes, Any]] = {}
        for component, committed in list(self._reshard.items()):
            full.update(
                resharded_state(
                    self._access,
                    self._by_component[component],
                    committed=committed,
                    boxing=self._boxing,
                )
            )
        for name, owner_changes in per_owner.items():
            manifest, size, compacted = write_owner_epoch(
                self._access,
                self._owners[name],
                epoch=epoch,
                changes=owner_changes,
                offsets=offsets,
                base=self._bases.get(name),
                chain=self._chain[name],
                entries=full.get(name),
            )
            written[name] = manifest
            report.bytes_written += size
            if compacted:
                report.compacted.append(name)
        # last: a crash before the commit leaves an epoch the stateful owners
        # published, which the next run's numbering (next_epoch) steps over
        for name in self._outputs:
            report.bytes_written += write_outputs_epoch(
                self._access, name, epoch, (pending or {}).get(name, {}), offsets
            )
        record = CommitRecord(
            epoch=epoch,
            offsets=offsets,
            owners=tuple(sorted([*self._owners, *self._outputs])),
            extra={"engine": ENGINE, "query": self._query, "batch": batch},
        )
        self._committer.commit(record)
        self._bases.update(written)
        self._offsets = offsets
        self._next_epoch = epoch + 1
        self._last_batch = batch
        self._reshard.clear()
        report.seconds = time.perf_counter() - started
        self.commits.append(report)
        return report

    def close(self) -> None:
        """Wait for background collection to finish."""
        self._committer.close()
