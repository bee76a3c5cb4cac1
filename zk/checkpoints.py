"""Global checkpoint commits of a topology in ZooKeeper.

Layout (see :mod:`zk.paths`)::

    /topologies/<name>/committed    {"epoch": e, "offsets": {...}, "owners": [...]}

A record of a topology run with ``sr3.rebalance.routing = key-groups`` also
carries ``"key_groups"``: each key-group-routed component's key group -> task
index table at that epoch, run-length encoded (:func:`sr3.keygroups.encode_table`).

A task may publish its manifest of epoch ``e`` before ``e`` commits; only the
epoch recorded here is globally committed, so recovery reads the manifests of
this epoch and ignores newer ones. The record only moves forward: a commit is
a compare-and-set on the znode version that refuses an older or equal epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError, CoordinationError
from zk.client import ZkSession

__all__ = ["CommitRecord", "ZkCheckpointStore"]

logger = logging.getLogger(__name__)

_CAS_ATTEMPTS = 20


@dataclass(frozen=True)
class CommitRecord:
    """The last globally committed epoch of a topology.

    Attributes:
        epoch: The committed epoch.
        offsets: Source offsets by spout task (``component/index``).
        owners: Owners whose manifests at ``epoch`` make up the state; empty for
            an epoch that starts a run from empty state.
        committed_at: Wall-clock seconds when it committed.
        extra: What the committing engine records besides (the Spark engine:
            ``{"engine": "spark", "query": id, "batch": n}``).
        key_groups: ``{component: encoded table}`` of the key-group-routed
            components (:func:`sr3.keygroups.encode_table`): which task index
            owns each key group at ``epoch``. Empty: the components route by
            Storm's fields grouping (the default).
    """

    epoch: int
    offsets: Mapping[str, Any] = field(default_factory=dict)
    owners: tuple[str, ...] = ()
    committed_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    key_groups: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a msgpack-friendly dict (``key_groups`` only when there are any)."""
        out = {
            "epoch": self.epoch,
            "offsets": dict(self.offsets),
            "owners": list(self.owners),
            "committed_at": self.committed_at,
            "extra": dict(self.extra),
        }
        if self.key_groups:
            out["key_groups"] = {c: list(t) for c, t in self.key_groups.items()}
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CommitRecord:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                epoch=int(raw["epoch"]),
                offsets=dict(raw.get("offsets", {})),
                owners=tuple(str(o) for o in raw.get("owners", ())),
                committed_at=float(raw.get("committed_at", 0.0)),
                extra=dict(raw.get("extra") or {}),
                key_groups={
                    str(c): [[int(i), int(n)] for i, n in runs]
                    for c, runs in dict(raw.get("key_groups") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed commit record {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc


class ZkCheckpointStore:
    """Reads and advances the committed epoch of topologies.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def __init__(self, session: ZkSession) -> None:
        self._session = session
        self._paths = session.paths

    def committed(self, topology: str) -> CommitRecord | None:
        """Return the topology's last committed epoch, or None before the first.

        A read: made again in the new session if this one expires meanwhile (a
        spout seeking to the commit must not die of it).

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: the record is malformed.
        """
        path = self._paths.committed(topology)
        client = self._session.client
        with self._session.translate(f"read commit of {topology!r}", path):
            try:
                data, _stat = self._session.call(
                    partial(client.get_async, path), across_expiry=True
                )
            except NoNodeError:
                return None
        return CommitRecord.from_dict(unpack_meta(data))

    def commit(self, topology: str, record: CommitRecord) -> None:
        """Record ``record`` as the topology's committed epoch.

        Raises:
            CoordinationError: a newer or equal epoch is committed already (not
                retriable: two coordinators run the topology), or ZooKeeper failed.
        """
        path = self._paths.committed(topology)
        body = pack_meta({**record.to_dict(), "committed_at": time.time()})
        client = self._session.client
        what = f"commit epoch {record.epoch} of topology {topology!r}"
        with self._session.translate(what, path):
            for _ in range(_CAS_ATTEMPTS):
                try:
                    data, stat = self._session.call(partial(client.get_async, path))
                except NoNodeError:
                    try:
                        self._session.call(
                            partial(client.create_async, path, body, makepath=True)
                        )
                    except NodeExistsError:
                        continue
                    return
                current = CommitRecord.from_dict(unpack_meta(data))
                if current.epoch >= record.epoch:
                    msg = (
                        f"{what}: epoch {current.epoch} is committed already; "
                        "only one coordinator may run a topology at a time"
                    )
                    err = CoordinationError(msg)
                    err.retriable = False
                    raise err
                try:
                    self._session.call(
                        partial(client.set_async, path, body, stat.version)
                    )
                except BadVersionError:
                    continue
                logger.info("committed epoch %s of %s", record.epoch, topology)
                return
        msg = f"{what}: lost the compare-and-set race {_CAS_ATTEMPTS} times"
        raise CoordinationError(msg)

    def retain(self, topology: str, record: CommitRecord, keep: int) -> list[int]:
        """Keep ``record`` restorable among the topology's ``keep`` newest commits.

        Records beyond the ``keep`` newest are deleted (their epochs go with the
        next collection unless a savepoint pins them). Returns the epochs kept.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        parent = self._paths.retained(topology)
        client = self._session.client
        body = pack_meta({**record.to_dict(), "committed_at": time.time()})
        what = f"retain epoch {record.epoch} of topology {topology!r}"
        with self._session.translate(what, parent):
            path = self._paths.retained_epoch(topology, record.epoch)
            try:
                self._session.call(
                    partial(client.create_async, path, body, makepath=True)
                )
            except NodeExistsError:
                self._session.call(partial(client.set_async, path, body))
            epochs = sorted(int(n) for n in self._session.children(parent))
            for epoch in epochs[:-keep]:
                try:
                    self._session.call(
                        partial(
                            client.delete_async,
                            self._paths.retained_epoch(topology, epoch),
                        )
                    )
                except NoNodeError:
                    pass
        return epochs[-keep:]

    def retained(self, topology: str) -> list[CommitRecord]:
        """Return the topology's retained commit records, oldest first.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: a record is malformed.
        """
        parent = self._paths.retained(topology)
        with self._session.translate(f"list retained epochs of {topology!r}", parent):
            names = self._session.children(parent)
            found = self._session.get_many(
                self._paths.retained_epoch(topology, int(n)) for n in names
            )
        records = [CommitRecord.from_dict(unpack_meta(d)) for d, _ in found.values()]
        return sorted(records, key=lambda r: r.epoch)

    def reset(self, topology: str, record: CommitRecord) -> None:
        """Overwrite the record unconditionally (a fresh run's empty epoch).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.committed(topology)
        body = pack_meta({**record.to_dict(), "committed_at": time.time()})
        client = self._session.client
        with self._session.translate(f"reset commit of {topology!r}", path):
            try:
                self._session.call(partial(client.set_async, path, body))
            except NoNodeError:
                self._session.call(
                    partial(client.create_async, path, body, makepath=True)
                )
