"""The records a run can start from, looked up and checked restorable.

A run may start from an earlier record than the last commit
(:class:`~backend.committer.StartPoint`): a savepoint's (:func:`savepoint_record`)
or a still restorable epoch's (:func:`epoch_record`: the committed one, a
savepoint's or a retained one). :func:`check_restorable` refuses a record whose
manifests are gone or which holds state of components the topology no longer
has. Each refusal names what exists, so the operator can pick another.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from backend.owners import OwnerId, topology_owners
from sr3.errors import ConfigError
from zk.checkpoints import CommitRecord

if TYPE_CHECKING:
    from backend.access import RingAccess

__all__ = ["check_restorable", "epoch_record", "missing_owners", "savepoint_record"]

E_UNKNOWN = (
    "topology {topology!r} has no savepoint {name!r}; its savepoints: {known} "
    "(sr3 savepoint list {topology})"
)
E_OTHER_TOPOLOGY = (
    "savepoint {name!r} belongs to topology {others}, not to {topology!r} (the "
    "topology file's stem); a savepoint restores only the topology it was taken "
    "of: run that topology's file, or take a savepoint of {topology!r}"
)
E_COLLECTED = (
    "epoch {epoch} of topology {topology!r} cannot be restored: its manifests "
    "were collected (or it never committed); restorable epochs: {known}. Pass "
    "one of them to --from-epoch, take savepoints (sr3 savepoint create) to "
    "keep an epoch, or set sr3.checkpoint.retain=N to keep the last N commits"
)
E_MISSING = (
    "{what} of topology {topology!r} cannot be restored: the manifests of epoch "
    "{epoch} are gone for {missing}; choose another savepoint or epoch "
    "(sr3 savepoint list {topology})"
)
E_RENAMED = (
    "{what} of topology {topology!r} holds the state of stateful component(s) "
    "{old} that the topology file no longer has (its stateful components: "
    "{new}); rename the component back, or start without {what} to begin "
    "from empty state"
)


def missing_owners(access: RingAccess, record: CommitRecord) -> list[str]:
    """Return the owners of ``record`` whose manifest of its epoch is gone."""
    return [o for o in record.owners if record.epoch not in access.manifests.epochs(o)]


def _restorable(access: RingAccess, topology: str) -> str:
    """Name the epochs of ``topology`` a run can start from (for messages)."""
    known = []
    record = access.checkpoints.committed(topology)
    if record is not None:
        known.append(f"{record.epoch} (committed)")
    known += [
        f"{p.record.epoch} (savepoint {p.name!r})"
        for p in access.savepoints.savepoints(topology)
    ]
    known += [
        f"{r.epoch} (retained)"
        for r in access.checkpoints.retained(topology)
        if record is None or r.epoch != record.epoch
    ]
    return ", ".join(known) or "none"


def savepoint_record(access: RingAccess, topology: str, name: str) -> CommitRecord:
    """Return the record savepoint ``name`` of ``topology`` pins.

    Raises:
        ConfigError: ``topology`` has no such savepoint (the message names the
            topology that has it, or the savepoints it has).
        CoordinationError: ZooKeeper failed.
    """
    point = access.savepoints.get(topology, name)
    if point is not None:
        return point.record
    others = [t for t in access.savepoints.topologies_with(name) if t != topology]
    if others:
        owners = " or ".join(repr(t) for t in others)
        msg = E_OTHER_TOPOLOGY.format(name=name, others=owners, topology=topology)
        raise ConfigError(msg)
    names = [repr(p.name) for p in access.savepoints.savepoints(topology)]
    known = ", ".join(names) or "none"
    raise ConfigError(E_UNKNOWN.format(topology=topology, name=name, known=known))


def epoch_record(access: RingAccess, topology: str, epoch: int) -> CommitRecord:
    """Return ``topology``'s record of ``epoch``: committed, a savepoint's or retained.

    Raises:
        ConfigError: no such record is kept (the message names the epochs that
            are).
        CoordinationError: ZooKeeper failed.
    """
    record = access.checkpoints.committed(topology)
    if record is not None and record.epoch == epoch:
        return record
    for point in access.savepoints.savepoints(topology):
        if point.record.epoch == epoch:
            return point.record
    for kept in access.checkpoints.retained(topology):
        if kept.epoch == epoch:
            return kept
    known = _restorable(access, topology)
    raise ConfigError(E_COLLECTED.format(epoch=epoch, topology=topology, known=known))


def check_restorable(
    access: RingAccess,
    topology: str,
    record: CommitRecord,
    *,
    what: str,
    components: Collection[str] | None,
) -> None:
    """Refuse to start ``topology`` from ``record`` if it cannot be restored.

    Args:
        access: Open handles on ZooKeeper and the ring.
        topology: The topology name.
        record: The record a run would start from.
        what: The record's name in messages (a savepoint's or an epoch's).
        components: The topology's stateful components now (None: not checked).

    Raises:
        ConfigError: the record holds state of components the topology no
            longer has, or manifests of its epoch are gone.
        CoordinationError: ZooKeeper failed.
    """
    if components is not None:
        tasks = topology_owners(record.owners, topology)
        held = sorted({OwnerId.parse(o).component for o in tasks})
        gone = [c for c in held if c not in components]
        if gone:
            msg = E_RENAMED.format(
                what=what,
                topology=topology,
                old=", ".join(map(repr, gone)),
                new=", ".join(map(repr, sorted(components))) or "none",
            )
            raise ConfigError(msg)
    missing = missing_owners(access, record)
    if missing:
        msg = E_MISSING.format(
            what=what, topology=topology, epoch=record.epoch, missing=missing
        )
        raise ConfigError(msg)
