"""Snapshot manifests and shard records in ZooKeeper, published atomically.

Layout (see :mod:`zk.paths`)::

    /owners/<owner>                       {"key_group_count": G, "latest": epoch}
    /owners/<owner>/epochs/<epoch:010d>   Manifest.to_dict()
    /owners/<owner>/shards/<shard id>     ShardMeta.to_dict()

``publish`` is one ZooKeeper multi-op: the owner record moves to the new epoch
(compare-and-set on its version) in the same transaction that creates the new
shard records and the manifest, so readers see all of it or none of it.

Reads, and the shard-record cache whose stamp every holder update moves, are
in :mod:`zk.manifest_reads`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
)

from sr3.codec import pack_meta
from sr3.errors import CoordinationError
from sr3.manifest import Manifest, ShardMeta
from sr3.ports import DropGuard
from zk.kazoo_errors import first_failure, translate_error
from zk.manifest_reads import OwnerHead, ZkManifestReader
from zk.paths import unquote_name

__all__ = ["ZkManifestStore"]

logger = logging.getLogger(__name__)

# ZooKeeper rejects requests over jute.maxbuffer (1 MiB by default); keep a margin.
_MAX_TXN_BYTES = 1000 * 1000
_DELETE_BATCH = 500
_CAS_ATTEMPTS = 100
E_TOO_BIG = (
    "publish of owner {owner!r} epoch {epoch} needs a {size}-byte ZooKeeper "
    "transaction ({count} new shards), over the 1 MB request limit; raise "
    "sr3.ring.max.shard.bytes so an epoch writes fewer shards"
)


def _error(msg: str, *, retriable: bool) -> CoordinationError:
    err = CoordinationError(msg)
    err.retriable = retriable
    return err


class ZkManifestStore(ZkManifestReader):
    """Implements :class:`sr3.ports.ManifestStore` on ZooKeeper.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def publish(self, manifest: Manifest, new_shards: Sequence[ShardMeta]) -> None:
        """Record ``new_shards`` and ``manifest`` atomically as the latest epoch.

        After a connection loss the transaction is retried; if the earlier attempt
        had committed, finding the identical manifest counts as success.

        Raises:
            CoordinationError: the epoch exists already, it is not newer than the
                latest, G differs from the owner's recorded G, a new shard is
                recorded already or belongs to another owner, or ZooKeeper failed.
            CodecError: the manifest or a shard record is over 1 MiB.
        """
        owner = manifest.owner
        strangers = [s.shard_id for s in new_shards if s.owner != owner]
        if strangers:
            msg = f"publish of owner {owner!r} got shards of other owners: {strangers}"
            raise _error(msg, retriable=False)
        body = pack_meta(manifest.to_dict())
        shards = [
            (self._paths.shard(owner, s.shard_id), pack_meta(s.to_dict()))
            for s in new_shards
        ]
        size = len(body) + sum(len(path) + len(data) for path, data in shards)
        if size > _MAX_TXN_BYTES:
            msg = E_TOO_BIG.format(
                owner=owner, epoch=manifest.epoch, size=size, count=len(shards)
            )
            raise _error(msg, retriable=False)
        attempts: list[int] = []

        def attempt() -> None:
            attempts.append(1)
            try:
                self._publish_once(manifest, body, shards, retried=len(attempts) > 1)
            except (ConnectionLoss, OperationTimeoutError):
                logger.info("publish of %r epoch %s retries", owner, manifest.epoch)
                raise

        what = f"publish owner {owner!r} epoch {manifest.epoch}"
        with self._session.translate(what, self._paths.owner(owner)):
            self._call(
                partial(self._session.client.ensure_path_async, self._paths.owners)
            )
            self._session.client.retry(attempt)
        logger.info(
            "published owner %r epoch %s (%d new shards)",
            owner,
            manifest.epoch,
            len(shards),
        )

    def _publish_once(
        self,
        manifest: Manifest,
        body: bytes,
        shards: list[tuple[str, bytes]],
        *,
        retried: bool,
    ) -> None:
        owner, epoch, groups = manifest.owner, manifest.epoch, manifest.key_group_count
        head = self._head(owner)
        if head is not None and head.key_group_count != groups:
            msg = (
                f"owner {owner!r} has G={head.key_group_count} key groups since its "
                f"first epoch; epoch {epoch} has G={groups}. Restore "
                "sr3.state.key.groups or publish under a new owner name"
            )
            raise _error(msg, retriable=False)
        if head is not None and epoch <= head.latest:
            if (
                retried
                and epoch == head.latest
                and self.manifest(owner, epoch) == manifest
            ):
                return  # our earlier attempt committed before the connection dropped
            msg = (
                f"owner {owner!r} has epoch {head.latest} already; epoch {epoch} is "
                "not newer. Another writer publishes for this owner, or the epoch "
                "counter went back: resume from latest() + 1"
            )
            raise _error(msg, retriable=False)
        txn = self._session.client.transaction()
        ops: list[str] = []
        new_head = OwnerHead(groups, epoch, -1).encode()
        if head is None:
            txn.create(self._paths.owner(owner), new_head)
            txn.create(self._paths.epochs(owner), b"")
            txn.create(self._paths.shards(owner), b"")
            ops += ["create owner", "create epochs dir", "create shards dir"]
        else:
            txn.set_data(self._paths.owner(owner), new_head, version=head.version)
            ops.append("update owner")
        for path, data in shards:
            txn.create(path, data)
            ops.append(f"create shard {unquote_name(path.rpartition('/')[2])!r}")
        txn.create(self._paths.epoch(owner, epoch), body)
        ops.append("create manifest")
        failure = first_failure(self._call(txn.commit_async, retry=False))
        if failure is not None:
            raise self._publish_failed(manifest, ops[failure[0]], failure[1])

    def _publish_failed(
        self, manifest: Manifest, op: str, exc: Exception
    ) -> CoordinationError:
        what = f"publish owner {manifest.owner!r} epoch {manifest.epoch}"
        if op in ("create owner", "update owner") and isinstance(
            exc, NodeExistsError | BadVersionError
        ):
            msg = (
                f"{what}: another writer published for this owner at the same time; "
                "nothing was written. Re-read latest() and retry"
            )
            return _error(msg, retriable=True)
        if op.startswith("create shard") and isinstance(exc, NodeExistsError):
            msg = (
                f"{what}: {op[7:]} is recorded already; nothing was written. Pass only "
                "shards written at this epoch in new_shards and reference older ones "
                "by id in the manifest"
            )
            return _error(msg, retriable=False)
        if op == "create manifest" and isinstance(exc, NodeExistsError):
            msg = f"{what}: the epoch exists already; nothing was written"
            return _error(msg, retriable=False)
        where = self._paths.absolute(self._paths.owner(manifest.owner))
        return translate_error(f"{what} ({op})", where, self._session.hosts, exc)

    def update_holders(
        self,
        owner: str,
        shard_id: str,
        change: Callable[[tuple[str, ...]], Sequence[str]],
    ) -> ShardMeta:
        """Replace a shard's holders with ``change(current)`` (compare-and-set loop).

        ``change`` must be a pure function of the current holders: it runs again
        whenever another writer got in first.

        Raises:
            CoordinationError: the shard is unknown, or ZooKeeper failed.
        """
        path = self._paths.shard(owner, shard_id)
        client = self._session.client
        what = f"update holders of shard {shard_id!r}"
        with self._session.translate(what, path):
            for _ in range(_CAS_ATTEMPTS):
                try:
                    data, stat = self._call(partial(client.get_async, path))
                except NoNodeError as exc:
                    where = self._paths.absolute(path)
                    msg = f"{what}: owner {owner!r} has no such shard ({where})"
                    raise _error(msg, retriable=False) from exc
                meta = self._decode(data, path, ShardMeta.from_dict)
                updated = meta.with_holders(change(meta.holders))
                if updated.holders == meta.holders:
                    return meta
                new = pack_meta(updated.to_dict())
                # the directory's data changes with the record: readers' caches
                # see a new stamp (module docs)
                failure = first_failure(
                    self._call(partial(self._set_holders, path, new, stat.version))
                )
                if failure is None:
                    return updated
                if isinstance(failure[1], BadVersionError):
                    logger.debug("holders of %s changed; retrying", shard_id)
                    continue
                if isinstance(failure[1], NoNodeError):
                    where = self._paths.absolute(path)
                    msg = f"{what}: owner {owner!r} has no such shard ({where})"
                    raise _error(msg, retriable=False) from failure[1]
                raise failure[1]
        msg = f"{what}: lost the compare-and-set race {_CAS_ATTEMPTS} times in a row"
        raise _error(msg, retriable=True)

    def _set_holders(self, path: str, data: bytes, version: int) -> Any:
        """Start the transaction of one holder update (a new one per retry).

        A retry after a connection loss that had committed fails its version
        check, and the compare-and-set loop then finds the update done.
        """
        txn = self._session.client.transaction()
        txn.set_data(path, data, version=version)
        txn.set_data(path.rpartition("/")[0], b"")
        return txn.commit_async()

    def drop(
        self,
        owner: str,
        epochs: Sequence[int],
        shard_ids: Sequence[str],
        *,
        guard: DropGuard | None = None,
    ) -> None:
        """Delete old manifests and the shards no remaining manifest references.

        Missing znodes are ignored, so a drop may be repeated. Manifests go first,
        so an interrupted drop leaves unreferenced shards, never dangling ones.
        With ``guard`` (a znode and its data version), every deletion batch is
        one transaction with a version check of that znode: a savepoint taken
        since the caller read the pins stops the drop before it deletes more.

        Raises:
            CoordinationError: ``epochs`` holds the latest epoch, a remaining
                manifest still references one of ``shard_ids``, the guard's znode
                changed (retriable: read the pins again), or ZooKeeper failed.
        """
        what = f"drop from owner {owner!r}"
        with self._session.translate(what, self._paths.owner(owner)):
            head = self._head(owner)
            if head is None:
                return
            if head.latest in epochs:
                msg = f"{what}: epoch {head.latest} is the latest; it cannot be dropped"
                raise _error(msg, retriable=False)
            gone = set(epochs)
            keep = [e for e in self.epochs(owner) if e not in gone]
            found = self._session.get_many(self._paths.epoch(owner, e) for e in keep)
            referenced = {
                sid
                for path, (data, _stat) in found.items()
                for sid in self._decode(data, path, Manifest.from_dict).shard_ids
            }
            still_used = sorted(referenced.intersection(shard_ids))
            if still_used:
                msg = f"{what}: remaining manifests still reference shards {still_used}"
                raise _error(msg, retriable=False)
            paths = [self._paths.epoch(owner, e) for e in sorted(gone)]
            paths += [self._paths.shard(owner, sid) for sid in shard_ids]
            for start in range(0, len(paths), _DELETE_BATCH):
                self._delete_batch(paths[start : start + _DELETE_BATCH], guard)
        logger.info(
            "dropped %d epochs and %d shards of %r", len(gone), len(shard_ids), owner
        )

    def _delete_batch(self, paths: list[str], guard: DropGuard | None) -> None:
        """Delete the existing ``paths`` in one transaction; retry if one vanishes.

        Raises:
            CoordinationError: ``guard``'s znode changed (retriable).
        """
        client = self._session.client
        for _ in range(_CAS_ATTEMPTS):
            pending = [(path, client.exists_async(path)) for path in paths]
            timeout = self._session.config.connect_timeout_s
            existing = [
                path for path, res in pending if res.get(timeout=timeout) is not None
            ]
            if not existing:
                return
            txn = client.transaction()
            if guard is not None:
                txn.check(*guard)
            for path in existing:
                txn.delete(path)
            failure = first_failure(self._call(txn.commit_async, retry=False))
            if failure is None:
                return
            if guard is not None and failure[0] == 0:
                msg = (
                    f"drop stopped: {guard[0]} changed since the kept epochs were "
                    "chosen (a savepoint was taken); the next collection reads it"
                )
                raise _error(msg, retriable=True)
            if not isinstance(failure[1], NoNodeError):
                raise failure[1]
            logger.debug("a znode vanished during a drop batch; retrying")
        msg = f"drop could not delete {len(paths)} znodes: they keep changing"
        raise _error(msg, retriable=True)
