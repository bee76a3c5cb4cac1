"""Savepoints: named commit records of a topology, pinned against garbage collection.

Layout (see :mod:`zk.paths`)::

    /topologies/<name>/savepoints/<savepoint>   {"name", "created_at", "record"}

A savepoint copies a committed :class:`zk.checkpoints.CommitRecord` (epoch,
offsets, owners, extra). While it exists, the collector keeps the manifests of
its epoch for its owners, and with them every shard they list; a run can start
from it (``sr3 run --from-savepoint``). Deleting it only unpins: a later
collection takes what nothing else references.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError, CoordinationError
from sr3.ports import DropGuard
from zk.checkpoints import CommitRecord
from zk.client import ZkSession
from zk.kazoo_errors import first_failure
from zk.paths import unquote_name

__all__ = ["Savepoint", "ZkSavepointStore"]


@dataclass(frozen=True)
class Savepoint:
    """A named commit record of one topology.

    Attributes:
        topology: The topology it belongs to.
        name: Its name, unique within the topology.
        record: The committed record it copies.
        created_at: Wall-clock seconds when it was taken.
    """

    topology: str
    name: str
    record: CommitRecord
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return a msgpack- and JSON-friendly dict."""
        return {
            "topology": self.topology,
            "name": self.name,
            "created_at": self.created_at,
            "record": self.record.to_dict(),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Savepoint:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                topology=str(raw["topology"]),
                name=str(raw["name"]),
                record=CommitRecord.from_dict(raw["record"]),
                created_at=float(raw.get("created_at", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed savepoint {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc


def _refused(msg: str) -> CoordinationError:
    err = CoordinationError(msg)
    err.retriable = False
    return err


class ZkSavepointStore:
    """Creates, reads, lists and deletes the savepoints of topologies.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def __init__(self, session: ZkSession) -> None:
        self._session = session
        self._paths = session.paths

    def __repr__(self) -> str:
        return f"ZkSavepointStore({self._session!r})"

    def create(self, topology: str, name: str, record: CommitRecord) -> Savepoint:
        """Record ``record`` as savepoint ``name`` of ``topology``.

        Raises:
            CoordinationError: a savepoint of that name exists (not retriable:
                delete it first or choose another name), or ZooKeeper failed.
        """
        savepoint = Savepoint(topology, name, record, created_at=time.time())
        path = self._paths.savepoint(topology, name)
        parent = self._paths.savepoints(topology)
        client = self._session.client
        body = pack_meta(savepoint.to_dict())
        with self._session.translate(f"create savepoint {name!r}", path):
            self._session.call(partial(client.ensure_path_async, parent))
            # the parent's data version is the guard of garbage collection
            # (:meth:`pins`): bumping it with the create stops a collection
            # that read the pins before this savepoint existed
            txn = client.transaction()
            txn.create(path, body)
            txn.set_data(parent, b"")
            failure = first_failure(self._session.call(txn.commit_async))
        if failure is not None:
            if isinstance(failure[1], NodeExistsError):
                msg = (
                    f"topology {topology!r} has a savepoint {name!r} already; "
                    "choose another --name or delete it first (sr3 savepoint delete)"
                )
                raise _refused(msg)
            with self._session.translate(f"create savepoint {name!r}", path):
                raise failure[1]
        return savepoint

    def get(self, topology: str, name: str) -> Savepoint | None:
        """Return savepoint ``name`` of ``topology``, or None.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: the stored savepoint is malformed.
        """
        path = self._paths.savepoint(topology, name)
        client = self._session.client
        with self._session.translate(f"read savepoint {name!r}", path):
            try:
                data, _stat = self._session.call(partial(client.get_async, path))
            except NoNodeError:
                return None
        return Savepoint.from_dict(unpack_meta(data))

    def savepoints(self, topology: str) -> list[Savepoint]:
        """Return ``topology``'s savepoints, oldest epoch first.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: a stored savepoint is malformed.
        """
        parent = self._paths.savepoints(topology)
        with self._session.translate(f"list savepoints of {topology!r}", parent):
            names = self._session.children(parent)
            found = self._session.get_many(
                self._paths.savepoint(topology, unquote_name(n)) for n in names
            )
        points = [Savepoint.from_dict(unpack_meta(data)) for data, _ in found.values()]
        return sorted(points, key=lambda p: (p.record.epoch, p.name))

    def pins(self, topology: str) -> tuple[dict[str, set[int]], DropGuard]:
        """Return :meth:`pinned_epochs` and the guard a collection drops under.

        The guard holds until a savepoint of ``topology`` is created: a drop
        under it (:meth:`zk.manifests.ZkManifestStore.drop`) deletes nothing a
        savepoint taken meanwhile pins.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: a stored savepoint is malformed.
        """
        parent = self._paths.savepoints(topology)
        client = self._session.client
        with self._session.translate(f"read the pins of {topology!r}", parent):
            self._session.call(partial(client.ensure_path_async, parent))
            _data, stat = self._session.call(partial(client.get_async, parent))
        # the version is read first: a savepoint created after it fails the guard
        return self.pinned_epochs(topology), (parent, stat.version)

    def pinned_epochs(self, topology: str) -> dict[str, set[int]]:
        """Return ``{owner: epochs}`` that ``topology``'s savepoints pin.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: a stored savepoint is malformed.
        """
        pinned: dict[str, set[int]] = {}
        for point in self.savepoints(topology):
            for owner in point.record.owners:
                pinned.setdefault(owner, set()).add(point.record.epoch)
        return pinned

    def delete(self, topology: str, name: str) -> bool:
        """Delete savepoint ``name``; return whether it existed.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.savepoint(topology, name)
        client = self._session.client
        with self._session.translate(f"delete savepoint {name!r}", path):
            try:
                self._session.call(partial(client.delete_async, path))
            except NoNodeError:
                return False
        return True

    def topologies_with(self, name: str) -> list[str]:
        """Return the topologies having a savepoint called ``name``, sorted.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        parent = self._paths.topologies
        with self._session.translate(f"find savepoint {name!r}", parent):
            topologies = [unquote_name(t) for t in self._session.children(parent)]
            found = self._session.get_many(
                self._paths.savepoint(t, name) for t in topologies
            )
        holders = {self._paths.savepoint(t, name): t for t in topologies}
        return sorted(holders[path] for path in found)
