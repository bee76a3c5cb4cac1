"""The state backend's handles on ZooKeeper and the ring, for one process.

A Storm stateful task, a Spark driver or executor, and the CLI open a
:class:`RingAccess` from a conf mapping (``sr3.zk.hosts``, ``sr3.zk.chroot``; the
ring secret comes from ``sr3.node.secret`` or the ``SR3_NODE_SECRET``
environment variable) to read the committed epoch of a topology, restore an
owner's key groups through star, line or tree recovery, and write snapshots.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from backend.owners import OwnerId, component_owners, owner_name, topology_owners
from backend.rescale import Route, reshard
from sr3.client import ClientPool
from sr3.codec import encode_key
from sr3.config import Sr3Config
from sr3.errors import (
    CodecError,
    CoordinationError,
    RecoveryError,
    ShardNotFoundError,
    SR3Error,
)
from sr3.manifest import Manifest
from sr3.ports import DropGuard
from sr3.recovery import Recoverer, RecoveryContext
from sr3.replication import LiveMembers, ReplicatedStore
from sr3.snapshot import GcReport, SnapshotReader, SnapshotWriter, WriteReport
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord, ZkCheckpointStore
from zk.client import ZkSession, connect
from zk.manifests import ZkManifestStore
from zk.membership import ZkMembership
from zk.savepoints import ZkSavepointStore

__all__ = [
    "CommitRecord",
    "CommittedState",
    "RestoreReport",
    "RingAccess",
    "config_from_conf",
]

#: reads of a running topology's committed state: each retry follows a commit
#: that collected the epoch being read
_READ_ATTEMPTS = 5

#: a topology's savepoint pins, ``{owner: epochs}``, and the guard they hold under
_Pins = tuple[dict[str, set[int]], DropGuard]

logger = logging.getLogger(__name__)

#: How a restore fetched the shards when the star/line/tree recovery failed.
PLAIN_FETCH = "parallel-fetch"


def config_from_conf(conf: Mapping[str, Any]) -> Sr3Config:
    """Return the sr3 configuration in a Storm conf (``sr3.*`` keys).

    Keys of other subsystems (``sr3.checkpoint.interval.s``) are ignored here.
    The ring secret falls back to ``SR3_NODE_SECRET``.

    Raises:
        ConfigError: a known key has an invalid value.
    """
    config = Sr3Config.from_mapping(conf, strict=False)
    if not config.node.secret and os.environ.get("SR3_NODE_SECRET"):
        node = replace(config.node, secret=os.environ["SR3_NODE_SECRET"])
        config = replace(config, node=node)
    return config


@dataclass(frozen=True)
class RestoreReport:
    """What a task's restore read.

    Attributes:
        epoch: Committed epoch restored (None: nothing committed, empty state).
        mechanism: Configured ``sr3.recovery.mechanism``.
        used: Transfer structure actually used.
        shards: Shards fetched.
        bytes_read: Payload bytes fetched.
        seconds: Wall time of the fetch and install.
        reason: Why the structure was chosen (the planner's words).
        phases: The recovery's timeline (plan, transfer, install...).
    """

    epoch: int | None
    mechanism: str
    used: str
    shards: int
    bytes_read: int
    seconds: float
    reason: str = ""
    phases: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        return {
            "epoch": self.epoch,
            "mechanism": self.mechanism,
            "used": self.used,
            "shards": self.shards,
            "bytes": self.bytes_read,
            "seconds": round(self.seconds, 6),
            "reason": self.reason,
            "phases": self.phases,
        }


class CommittedState(Mapping[tuple[Any, ...], dict[str, Any]]):
    """A component's committed state, ``{key: fields}``, with every state key kept.

    A dict would merge keys Python holds equal (``(1,)``, ``(1.0,)``,
    ``(True,)``), which the state keeps apart: here they are distinct entries,
    looked up by the key's encoding, as the state looks them up. A key met
    twice (two owners of a rescaled component) keeps its last fields. Build a
    plain dict from it only when such keys cannot occur.

    Args:
        rows: ``(key, fields)`` pairs.
    """

    def __init__(self, rows: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]):
        self._rows: dict[bytes, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        for key, fields in rows:
            self._rows[encode_key(key)] = (key, fields)

    def __getitem__(self, key: tuple[Any, ...]) -> dict[str, Any]:
        try:
            return self._rows[encode_key(key)][1]
        except (CodecError, TypeError) as exc:  # no state key looks like it
            raise KeyError(key) from exc

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return (key for key, _fields in self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CommittedState):
            return self._rows == other._rows
        if isinstance(other, Mapping):
            return len(self) == len(other) and all(
                key in other and other[key] == fields for key, fields in self.items()
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable fields, as a dict

    def __repr__(self) -> str:
        rows = ", ".join(f"{key!r}: {fields!r}" for key, fields in self.items())
        return f"CommittedState({{{rows}}})"


class RingAccess:
    """Open handles on ZooKeeper and the ring for one process.

    Args:
        config: Where ZooKeeper is and how to reach the ring nodes.
        create: Create a missing chroot (writers); readers pass False, so a
            mistyped chroot is an error instead of a new empty cluster.
    """

    def __init__(self, config: Sr3Config, *, create: bool = True) -> None:
        self.config = config
        self.session: ZkSession = connect(config.zk, create=create)
        self.pool = ClientPool(config.node)
        self.membership = ZkMembership(self.session)
        self.members = LiveMembers(self.membership)
        self.store = ReplicatedStore(
            members=self.members, pool=self.pool, ring_config=config.ring
        )
        self.manifests = ZkManifestStore(self.session)
        self.checkpoints = ZkCheckpointStore(self.session)
        self.savepoints = ZkSavepointStore(self.session)
        self._writer = SnapshotWriter(
            store=self.store,
            manifests=self.manifests,
            max_shard_bytes=config.ring.max_shard_bytes,
        )
        self._reader = SnapshotReader(store=self.store, manifests=self.manifests)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> RingAccess | None:
        """Open from a Storm conf; None when ``sr3.zk.hosts`` is not set.

        Raises:
            ConfigError: a ``sr3.*`` value is invalid.
            CoordinationError: ZooKeeper is unreachable.
        """
        config = config_from_conf(conf)
        if not config.zk.hosts:
            return None
        return cls(config)

    def close(self) -> None:
        """Close the ring connections and the ZooKeeper session."""
        self.store.close()
        self.pool.close_all()
        self.membership.close()
        self.session.close()

    def committed(self, topology: str) -> CommitRecord | None:
        """Return the topology's last globally committed epoch.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        return self.checkpoints.committed(topology)

    def restore(
        self,
        owner: str,
        record: CommitRecord | None,
        *,
        key_group_count: int,
        mechanism: str,
    ) -> tuple[KeyedState, RestoreReport]:
        """Rebuild ``owner``'s keyed state of the committed epoch.

        The transfer goes through :mod:`sr3.recovery` with ``mechanism`` (star,
        line, tree or auto); should that fail, a plain parallel fetch from the
        shards' holders is tried, and the report says so. Manifests newer than
        the committed epoch (published before a failure, never committed) are
        ignored. Key groups stay encoded until touched when
        ``sr3.recovery.lazy.install`` is on.

        Raises:
            RecoveryError, ShardNotFoundError: the snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        started = time.perf_counter()
        if record is None or owner not in record.owners:
            empty = RestoreReport(None, mechanism, "none", 0, 0, 0.0)
            return KeyedState(key_group_count), empty
        lazy = self.config.recovery.lazy_install
        context = RecoveryContext(
            manifests=self.manifests,
            members=self.members,
            pool=self.pool,
            node_config=self.config.node,
            recovery=replace(self.config.recovery, mechanism=mechanism),
        )
        try:
            result = Recoverer(context).recover(
                owner, mechanism=mechanism, epoch=record.epoch, lazy=lazy
            )
        except RecoveryError as exc:
            logger.warning(
                "%s recovery of %s@%s failed (%s); fetching its shards directly",
                mechanism,
                owner,
                record.epoch,
                exc,
            )
        else:
            report = RestoreReport(
                record.epoch,
                mechanism,
                result.mechanism,
                result.shards,
                result.bytes_received,
                time.perf_counter() - started,
                reason=result.reason,
                phases=[span.to_dict() for span in result.timeline],
            )
            return result.state, report
        manifest = self._reader.manifest(owner, record.epoch)
        state = KeyedState(manifest.key_group_count)
        shards = 0
        size = 0
        for shard in self._reader.fetch(manifest):
            state.install(shard.key_groups, lazy=lazy)
            shards += 1
            size += shard.meta.size
        seconds = time.perf_counter() - started
        report = RestoreReport(
            record.epoch, mechanism, PLAIN_FETCH, shards, size, seconds
        )
        return state, report

    def restore_task(  # noqa: PLR0913 (what identifies a task and its restore)
        self,
        *,
        topology: str,
        component: str,
        index: int,
        tasks: int,
        record: CommitRecord | None,
        key_group_count: int,
        mechanism: str,
        route: Route,
    ) -> tuple[KeyedState, RestoreReport]:
        """Restore task ``index`` of ``tasks`` of a stateful component.

        When the committed epoch holds as many owners of the component as it
        has tasks now (or none), this is :meth:`restore` of the task's owner.
        When the component was rescaled, every committed owner is restored and
        the task keeps the keys ``route`` sends to ``index``: ``route(key,
        stored_route)`` is the task index among ``tasks`` Storm's fields grouping
        sends the key's tuples to, ``stored_route`` the key's route when it is
        not the key itself (:data:`sr3.state.ROUTE_FIELD`). The report's
        ``used`` says so. The task's next snapshot must be full.

        Raises:
            RecoveryError, ShardNotFoundError: a snapshot cannot be read.
            CoordinationError: ZooKeeper failed.
        """
        owner = owner_name(topology, component, index)
        committed_owners = record.owners if record else ()
        committed = component_owners(committed_owners, topology, component)
        if record is None or len(committed) in (0, tasks):
            return self.restore(
                owner, record, key_group_count=key_group_count, mechanism=mechanism
            )
        started = time.perf_counter()
        found = reshard(
            self,
            record,
            committed,
            key_group_count=key_group_count,
            mechanism=mechanism,
            route=route,
            index=index,
        )
        state = KeyedState(key_group_count)
        for placed in found.keys:
            state.for_key(placed.key, placed.route).update(placed.fields)
        used = ",".join(sorted(found.used))
        how = f"rescale {len(committed)}->{tasks} tasks ({used})"
        logger.info("%s restored from %d owners: %s", owner, len(committed), how)
        return state, RestoreReport(
            record.epoch,
            mechanism,
            how,
            found.shards,
            found.bytes_read,
            time.perf_counter() - started,
            reason=f"{component} had {len(committed)} tasks at epoch {record.epoch}",
        )

    def committed_state(
        self, topology: str, component: str
    ) -> tuple[int, CommittedState]:
        """Return the committed epoch and state of a component, ``{key: fields}``.

        Keys that Python holds equal (``(1,)``, ``(1.0,)``, ``(True,)``) are
        distinct state keys and stay distinct entries of the returned mapping.

        Raises:
            RecoveryError: the topology has no committed epoch, or the component
                no state in it.
            CoordinationError: ZooKeeper failed.
        """
        epoch, items = self._committed_items(topology, component)
        return epoch, CommittedState(items)

    def _committed_items(
        self, topology: str, component: str
    ) -> tuple[int, list[tuple[tuple[Any, ...], dict[str, Any]]]]:
        """Return :meth:`committed_state` as a list of ``(key, fields)``.

        Keys Python holds equal (``1``, ``1.0``, ``True``) are distinct state
        keys and stay apart here.

        Raises:
            RecoveryError: see :meth:`committed_state`.
            CoordinationError: ZooKeeper failed.
        """
        record = self.committed(topology)
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return self._items_at(topology, component, record)
            except (CoordinationError, ShardNotFoundError):
                # a running topology committed a newer epoch and collected the
                # one being read; read again at the newer epoch
                newer = self.committed(topology)
                if newer is None or record is None or newer.epoch == record.epoch:
                    raise
                record = newer
        return self._items_at(topology, component, record)

    def _items_at(
        self, topology: str, component: str, record: CommitRecord | None
    ) -> tuple[int, list[tuple[tuple[Any, ...], dict[str, Any]]]]:
        """Return the component's ``(key, fields)`` at ``record``'s epoch."""
        if record is None:
            msg = (
                f"topology {topology!r} has no committed epoch in "
                f"{self.config.zk.chroot}; run it first (`sr3 run FILE`)"
            )
            raise RecoveryError(msg)
        owners = component_owners(record.owners, topology, component)
        if not owners:
            stateful = topology_owners(record.owners, topology)
            known = sorted({OwnerId.parse(o).component for o in stateful})
            msg = (
                f"component {component!r} of topology {topology!r} has no state "
                f"in committed epoch {record.epoch}; stateful components: {known}"
            )
            raise RecoveryError(msg)
        found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        for owner in owners:
            manifest = self._reader.manifest(owner, record.epoch)
            state = KeyedState(manifest.key_group_count)
            for shard in self._reader.fetch(manifest):
                state.install(shard.key_groups)
            found.extend(state.items())
        return record.epoch, found

    def state_summary(
        self, topology: str, components: Iterable[str]
    ) -> dict[str, dict[str, Any]]:
        """Return ``{component: {"epoch", "keys"}}`` of the committed state.

        A component without state in the committed epoch (a short run) has 0
        keys at the committed epoch (None when nothing was committed).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        summary: dict[str, dict[str, Any]] = {}
        for name in components:
            try:
                epoch, state = self._committed_items(topology, name)
            except RecoveryError:
                record = self.committed(topology)
                summary[name] = {"epoch": record and record.epoch, "keys": 0}
                continue
            summary[name] = {"epoch": epoch, "keys": len(state)}
        return summary

    def committed_dump(
        self, topology: str, component: str
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Return the committed epoch and state as ``sr3 state dump`` prints it.

        Keys are JSON lists of the key's values, sorted.

        Raises:
            RecoveryError: nothing committed, or the component has no state.
            CoordinationError: ZooKeeper failed.
        """
        epoch, state = self._committed_items(topology, component)
        # JSON keeps 1, 1.0 and true apart, as the state does
        rows = {json.dumps(list(key)): fields for key, fields in state}
        return epoch, dict(sorted(rows.items()))

    def write(
        self,
        *,
        owner: str,
        epoch: int,
        key_group_count: int,
        key_groups: Iterable[tuple[int, bytes]],
        kind: str,
        offsets: Mapping[str, Any],
        base: Manifest | None = None,
    ) -> WriteReport:
        """Write one epoch of ``owner`` through the ring and publish its manifest.

        A delta appends to ``base`` (default: the latest published manifest).

        Raises:
            QuorumError: a shard missed its write quorum.
            CoordinationError: the manifest could not be published.
        """
        return self._writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=key_group_count,
            key_groups=key_groups,
            kind=kind,
            offsets=offsets,
            base=base,
        )

    def collect_committed(self, owners: Iterable[str], epoch: int) -> None:
        """Forget what committed ``epoch`` made unreachable for ``owners``.

        The manifests before ``epoch`` go (committed ones and those a rollback
        left behind; ``epoch``'s manifest lists its whole chain), except the
        epochs a savepoint pins. When ``epoch`` starts a new chain (a full
        snapshot), shards no remaining manifest references are deleted too,
        records and replicas. Failures are logged: what is kept is only garbage.
        """
        pins: dict[str, _Pins] = {}
        for owner in owners:
            try:
                keep, guard = self._pinned(owner, pins)
                epochs = self.manifests.epochs(owner)
                old = [e for e in epochs if e < epoch and e not in keep]
                if old:
                    self.manifests.drop(owner, old, [], guard=guard)
                if self.manifests.manifest(owner, epoch).base_epoch == epoch:
                    self._writer.collect_garbage(owner, epoch, keep=keep, guard=guard)
            except SR3Error as exc:
                logger.warning("old epochs of %s before %s kept: %s", owner, epoch, exc)

    def collect_garbage(self, owner: str, committed_epoch: int) -> GcReport:
        """Drop ``owner``'s epochs before the base of ``committed_epoch``'s chain.

        Shards no remaining manifest references are deleted from the ring. The
        epochs a savepoint pins stay, with every shard they list.

        Raises:
            CoordinationError: ZooKeeper failed, or no such epoch.
        """
        keep, guard = self._pinned(owner, {})
        return self._writer.collect_garbage(
            owner, committed_epoch, keep=keep, guard=guard
        )

    def _pinned(
        self, owner: str, pins: dict[str, _Pins]
    ) -> tuple[set[int], DropGuard | None]:
        """Return ``owner``'s epochs its topology's savepoints and retained commits pin.

        ``pins`` caches each topology's pins for one collection. A drop under
        the guard stops should a savepoint be taken meanwhile.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        try:
            topology = OwnerId.parse(owner).topology
        except ValueError:
            return set(), None  # not a task's state (sr3 snapshot put): no savepoints
        if topology not in pins:
            pinned, guard = self.savepoints.pins(topology)
            # commits kept restorable (sr3.checkpoint.retain) are kept alike;
            # the committer writes them before it collects, so no guard is needed
            for record in self.checkpoints.retained(topology):
                for held in record.owners:
                    pinned.setdefault(held, set()).add(record.epoch)
            pins[topology] = (pinned, guard)
        pinned, guard = pins[topology]
        return pinned.get(owner, set()), guard
