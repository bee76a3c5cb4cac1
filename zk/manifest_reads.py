"""Reading snapshot manifests and shard records from ZooKeeper, with a shard cache.

:class:`ZkManifestReader` is the read side of :class:`zk.manifests.ZkManifestStore`
(which adds publishing, holder updates and drops); the layout is described there.

Shard records are cached per store. The ``shards`` directory's stat is their
stamp: creating or deleting a record moves its ``cversion``, and every holder
update sets the directory's data in the same transaction as the record, which
moves its ``version``. A read costs one round trip while the stamp is unchanged
(reading 250 records one by one took 30 to 300 ms per snapshot read).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from kazoo.exceptions import NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError
from sr3.manifest import Manifest, ShardMeta
from zk.client import ZkSession
from zk.paths import ZkPaths, unquote_name

__all__ = ["OwnerHead", "ZkManifestReader"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class OwnerHead:
    """The owner record: G and the latest epoch, with the znode version read."""

    key_group_count: int
    latest: int
    version: int

    def encode(self) -> bytes:
        """Return the owner record's stored bytes (without the version)."""
        return pack_meta(
            {"key_group_count": self.key_group_count, "latest": self.latest}
        )


class ZkManifestReader:
    """The read side of :class:`sr3.ports.ManifestStore` on ZooKeeper.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def __init__(self, session: ZkSession) -> None:
        self._session = session
        self._paths: ZkPaths = session.paths
        # owner -> ((version, cversion) of its shards directory, records then)
        self._shard_cache: dict[str, tuple[tuple[int, int], dict[str, ShardMeta]]] = {}
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._session!r})"

    def _call(self, operation: Callable[[], Any], *, retry: bool = True) -> Any:
        return self._session.call(operation, retry=retry)

    def _decode(self, data: bytes, path: str, parse: Callable[[Any], _T]) -> _T:
        """Decode a stored record, naming its znode when it is damaged.

        Raises:
            CodecError: the record is not sr3 metadata this build reads.
        """
        try:
            return parse(unpack_meta(data))
        except CodecError as exc:
            msg = (
                f"znode {self._paths.absolute(path)}: {exc}; the record is damaged "
                "or was written by another sr3 version: upgrade sr3, or delete the "
                "owner's records if its state is no longer needed"
            )
            raise CodecError(msg) from exc

    def _head(self, owner: str) -> OwnerHead | None:
        try:
            data, stat = self._call(
                partial(self._session.client.get_async, self._paths.owner(owner))
            )
        except NoNodeError:
            return None
        raw: Any = self._decode(data, self._paths.owner(owner), lambda raw: raw)
        try:
            return OwnerHead(
                int(raw["key_group_count"]), int(raw["latest"]), stat.version
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"owner record of {owner!r} is malformed: {raw!r}"
            raise CodecError(msg) from exc

    def owners(self) -> list[str]:
        """Return every owner with at least one published epoch, sorted.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        with self._session.translate("list owners", self._paths.owners):
            return sorted(
                unquote_name(c) for c in self._session.children(self._paths.owners)
            )

    def key_group_count(self, owner: str) -> int | None:
        """Return the G recorded on the owner's first epoch, or None if new.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        with self._session.translate(f"read owner {owner!r}", self._paths.owner(owner)):
            head = self._head(owner)
        return None if head is None else head.key_group_count

    def latest(self, owner: str) -> Manifest | None:
        """Return the newest committed manifest, or None if the owner has none.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        with self._session.translate(f"read owner {owner!r}", self._paths.owner(owner)):
            head = self._head(owner)
        return None if head is None else self.manifest(owner, head.latest)

    def manifest(self, owner: str, epoch: int) -> Manifest:
        """Return the manifest of ``epoch``.

        Raises:
            CoordinationError: no such epoch, or ZooKeeper failed.
            CodecError: the stored manifest is malformed.
        """
        path = self._paths.epoch(owner, epoch)
        with self._session.translate(f"read manifest of {owner!r} epoch {epoch}", path):
            data, _stat = self._call(partial(self._session.client.get_async, path))
        return self._decode(data, path, Manifest.from_dict)

    def epochs(self, owner: str) -> list[int]:
        """Return the owner's committed epochs, ascending.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.epochs(owner)
        with self._session.translate(f"list epochs of {owner!r}", path):
            return sorted(
                ZkPaths.epoch_of(name) for name in self._session.children(path)
            )

    def shards(self, owner: str) -> dict[str, ShardMeta]:
        """Return every shard the owner's manifests reference, with holders.

        Served from this store's cache while the shards directory's stamp is
        unchanged (see the module docs); otherwise every record is read again.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: a stored shard record is malformed.
        """
        directory = self._paths.shards(owner)
        client = self._session.client
        with self._session.translate(f"list shards of {owner!r}", directory):
            stat = self._call(partial(client.exists_async, directory))
            if stat is None:
                return {}
            stamp = (stat.version, stat.cversion)
            with self._cache_lock:
                cached = self._shard_cache.get(owner)
            if cached is not None and cached[0] == stamp:
                return dict(cached[1])
            # the stamp was read first: a change made while reading moves it again
            names = self._session.children(directory)
            found = self._session.get_many(f"{directory}/{name}" for name in names)
        metas = [
            self._decode(data, path, ShardMeta.from_dict)
            for path, (data, _) in found.items()
        ]
        records = {meta.shard_id: meta for meta in metas}
        with self._cache_lock:
            self._shard_cache[owner] = (stamp, records)
        return dict(records)
