"""A component's committed state, read back from the ring for the CLI and tests.

:class:`CommittedReader` reads the key groups every owner of a component holds
at its topology's committed epoch (reading again when a running topology
collects the epoch being read) and returns them as a :class:`CommittedState`, a
per-component summary, or the rows ``sr3 state dump`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from backend.owners import OwnerId, component_owners, topology_owners
from sr3.codec import encode_key
from sr3.errors import CodecError, CoordinationError, RecoveryError, ShardNotFoundError
from sr3.snapshot import SnapshotReader
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord, ZkCheckpointStore

__all__ = ["CommittedReader", "CommittedState"]

#: reads of a running topology's committed state: each retry follows a commit
#: that collected the epoch being read
_READ_ATTEMPTS = 5


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


class CommittedReader:
    """Reads components' committed state through the ring.

    Args:
        checkpoints: The topologies' commit records.
        reader: Reads manifests and shards from the ring.
        chroot: The cluster's ZooKeeper chroot, named when nothing is committed.
    """

    def __init__(
        self, checkpoints: ZkCheckpointStore, reader: SnapshotReader, chroot: str
    ) -> None:
        self._checkpoints = checkpoints
        self._reader = reader
        self._chroot = chroot

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
        record = self._checkpoints.committed(topology)
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return self._items_at(topology, component, record)
            except (CoordinationError, ShardNotFoundError):
                # a running topology committed a newer epoch and collected the
                # one being read; read again at the newer epoch
                newer = self._checkpoints.committed(topology)
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
                f"{self._chroot}; run it first (`sr3 run FILE`)"
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
                record = self._checkpoints.committed(topology)
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
