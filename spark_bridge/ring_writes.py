"""One owner's epoch of a micro-batch, written to the ring: delta or FULL.

:class:`spark_bridge.ring.BatchCommitter` calls these for every owner of a
batch's epoch. :func:`write_owner_epoch` groups the owner's changed keys by
key group and writes a delta on its last committed manifest, or a FULL epoch:
the owner's first, a compaction (its committed state read back from the ring
with the changes folded in, when :class:`backend.chain.OwnerChain` says the
chain is long enough), or a rescaled component's rewrite, whose whole state
:func:`resharded_state` reads back and re-routes to the new tasks.
:func:`write_outputs_epoch` writes a ``KafkaSink``'s pending outputs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from backend.access import RingAccess
from backend.chain import FULL, OwnerChain
from backend.rescale import reshard
from spark_bridge.ring_owners import Owner
from sr3.codec import (
    decode_value,
    encode_key,
    encode_key_group_delta_raw,
    encode_key_group_raw,
)
from sr3.key_state import ROUTE_FIELD
from sr3.keygroups import key_group_of_encoded
from sr3.manifest import Manifest
from topology_api.java_hash import IntegerBoxing, key_task_index
from zk.checkpoints import CommitRecord

__all__ = ["resharded_state", "write_outputs_epoch", "write_owner_epoch"]

logger = logging.getLogger(__name__)


def write_owner_epoch(  # noqa: PLR0913 (the owner's epoch and its chain)
    access: RingAccess,
    owner: Owner,
    *,
    epoch: int,
    changes: Mapping[bytes, bytes | None],
    offsets: Mapping[str, Any],
    base: Manifest | None,
    chain: OwnerChain,
    entries: dict[bytes, Any] | None = None,
) -> tuple[Manifest, int, bool]:
    """Write one owner's epoch: a delta, or FULL (first, compaction, rescale).

    Args:
        access: Open handles on ZooKeeper and the ring.
        owner: The owner written.
        epoch: The epoch written.
        changes: ``{encoded key: state blob, or None if deleted}``.
        offsets: The spouts' offsets recorded with the epoch.
        base: The owner's last committed manifest (None: it has none).
        chain: The owner's delta chain, told what was written.
        entries: When given, the owner's whole state before ``changes`` (a
            rescaled component's first batch): the epoch is FULL.

    Returns:
        The manifest written, its payload bytes (one replica), and whether the
        owner was compacted.

    Raises:
        QuorumError: a shard missed its write quorum.
    """
    groups: dict[int, tuple[dict[bytes, Any], list[bytes]]] = {}
    for key, blob in changes.items():
        upserts, deletes = groups.setdefault(
            key_group_of_encoded(key, owner.key_groups), ({}, [])
        )
        if blob is None:
            deletes.append(key)
        else:
            upserts[key] = decode_value(blob)
    if entries is not None:
        for key, blob in changes.items():
            if blob is None:
                entries.pop(key, None)
            else:
                entries[key] = decode_value(blob)
        regrouped: dict[int, dict[bytes, Any]] = {}
        for key, fields in entries.items():
            kg = key_group_of_encoded(key, owner.key_groups)
            regrouped.setdefault(kg, {})[key] = fields
        blobs = {kg: encode_key_group_raw(g) for kg, g in sorted(regrouped.items())}
        kind, compacted = "full", False
        base = None
    elif base is None:
        blobs = {
            kg: encode_key_group_raw(upserts)
            for kg, (upserts, _deletes) in sorted(groups.items())
            if upserts
        }
        kind, compacted = "full", False
    elif groups and chain.next_kind() == FULL:
        blobs = _compact(access, owner, base, groups)
        kind, compacted = "full", True
    else:
        blobs = {
            kg: encode_key_group_delta_raw(upserts, deletes)
            for kg, (upserts, deletes) in sorted(groups.items())
        }
        kind, compacted = "delta", False
    written = access.write(
        owner=owner.name,
        epoch=epoch,
        key_group_count=owner.key_groups,
        key_groups=blobs.items(),
        kind=kind,
        offsets=offsets,
        base=base,
    )
    if kind == FULL or groups:
        chain.written(kind)
    return written.manifest, written.bytes_written, compacted


def write_outputs_epoch(
    access: RingAccess,
    name: str,
    epoch: int,
    entries: Mapping[bytes, Any],
    offsets: Mapping[str, Any],
) -> int:
    """Write an output owner's whole state as a FULL epoch; return its bytes.

    One key group: the state is one batch's outputs, read back whole.

    Raises:
        QuorumError: a shard missed its write quorum.
    """
    blobs = {0: encode_key_group_raw(dict(entries))} if entries else {}
    written = access.write(
        owner=name,
        epoch=epoch,
        key_group_count=1,
        key_groups=blobs.items(),
        kind=FULL,
        offsets=offsets,
        base=None,
    )
    return written.bytes_written


def resharded_state(
    access: RingAccess,
    owners: Sequence[Owner],
    *,
    committed: tuple[int, list[str]],
    boxing: IntegerBoxing,
) -> dict[str, dict[bytes, Any]]:
    """Every owner's whole state of a rescaled component, keys re-routed.

    Args:
        access: Open handles on ZooKeeper and the ring.
        owners: The component's owners now, one per task.
        committed: The epoch the component was committed at and the owners
            it was committed with.
        boxing: How Storm's fields grouping hashes int keys.
    """
    epoch, before = committed
    out: dict[str, dict[bytes, Any]] = {o.name: {} for o in owners}
    found = reshard(
        access.restorer,
        CommitRecord(epoch=epoch, owners=tuple(before)),
        before,
        key_group_count=owners[0].key_groups,
        mechanism="star",
        route=functools.partial(key_task_index, num_tasks=len(owners), boxing=boxing),
    )
    for placed in found.keys:
        route, fields = placed.route, placed.fields
        # the key's route stays with its fields
        entry = fields if route is None else {ROUTE_FIELD: route, **fields}
        out[owners[placed.index].name][encode_key(placed.key)] = entry
    logger.info(
        "%s rescaled from %d to %d tasks: every task rewritten in full",
        owners[0].component,
        len(before),
        len(owners),
    )
    return out


def _compact(
    access: RingAccess,
    owner: Owner,
    base: Manifest,
    groups: Mapping[int, tuple[dict[bytes, Any], list[bytes]]],
) -> dict[int, bytes]:
    record = CommitRecord(epoch=base.epoch, owners=(owner.name,))
    state, _report = access.restorer.restore(
        owner.name, record, key_group_count=owner.key_groups, mechanism="star"
    )
    state.install(
        {
            kg: encode_key_group_delta_raw(upserts, deletes)
            for kg, (upserts, deletes) in groups.items()
        }
    )
    return state.snapshot(incremental=False)
