"""A ring node's durable replica store: one immutable, checksummed file per replica.

Layout under ``data_dir``: ``replicas/<name>`` holds live replicas, where
``<name>`` is :func:`~sr3.replica_file.replica_name` of the shard id;
``quarantine/`` receives files whose header is unreadable at start-up. The file
format is :mod:`sr3.replica_file`'s.

Writes go to a dot-prefixed temp file in ``replicas/``, are fsynced, renamed over
the final name and the directory is fsynced, so a crash at any point leaves
either the old replica or the new one under the final name, never a half file.
"""

from __future__ import annotations

import builtins
import logging
import os
import secrets
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from sr3.errors import ChecksumError, ShardNotFoundError, StorageError
from sr3.replica_file import (
    ReplicaInfo,
    ReplicaReader,
    encode_header,
    file_size,
    read_header,
    replica_name,
    validate_shard_id,
)

__all__ = ["ReplicaStore"]

logger = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"
_VERIFY_CHUNK = 1024 * 1024


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ReplicaStore:
    """Durable shard replicas under ``data_dir``, indexed in memory; thread-safe.

    The index is rebuilt at construction from file headers only; payload
    checksums are checked on every read and by :meth:`verify`.

    Raises:
        StorageError: the directories cannot be created or listed.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._replicas = self.data_dir / "replicas"
        self._quarantine = self.data_dir / "quarantine"
        self._lock = threading.Lock()
        self._index: dict[str, ReplicaInfo] = {}
        self._bytes = 0
        try:
            self._replicas.mkdir(parents=True, exist_ok=True)
            self._quarantine.mkdir(exist_ok=True)
            self._scan()
        except OSError as exc:
            msg = f"cannot open replica store {self.data_dir}: {exc}; check the path"
            raise StorageError(msg) from exc

    def _scan(self) -> None:
        for entry in sorted(os.scandir(self._replicas), key=lambda e: e.name):
            path = Path(entry.path)
            if not entry.is_file(follow_symlinks=False):
                logger.warning("ignoring %s: not a regular file", path)
                continue
            if entry.name.startswith(_TEMP_PREFIX):
                logger.warning("removing %s, left by a write that did not finish", path)
                path.unlink()
                continue
            try:
                with path.open("rb") as f:
                    info = read_header(f, path)
                problem = self._misplaced(path, info)
            except ChecksumError as exc:
                problem = str(exc)
            if problem:
                self._move_to_quarantine(path, problem)
                continue
            self._index[info.shard_id] = info
            self._bytes += info.size
        logger.info(
            "replica store %s: %d replicas, %d bytes",
            self.data_dir,
            len(self._index),
            self._bytes,
        )

    @staticmethod
    def _misplaced(path: Path, info: ReplicaInfo) -> str:
        expected = file_size(info)
        if path.stat().st_size != expected:
            return f"replica file {path} is not {expected} bytes long"
        if path.name != replica_name(info.shard_id):
            return f"replica file {path} holds shard {info.shard_id!r}"
        return ""

    def _move_to_quarantine(self, path: Path, problem: str) -> None:
        target = self._quarantine / f"{path.name}.{time.time_ns()}"
        logger.warning("quarantining %s as %s: %s", path, target, problem)
        os.replace(path, target)

    def _path(self, shard_id: str) -> Path:
        return self._replicas / replica_name(shard_id)

    def _not_found(self, shard_id: str) -> ShardNotFoundError:
        msg = (
            f"shard {shard_id!r} has no replica in {self._replicas}; "
            "read it from another holder or let repair copy it here"
        )
        return ShardNotFoundError(msg)

    def put(
        self, shard_id: str, data: bytes | bytearray | memoryview, crc32: int
    ) -> bool:
        """Store a replica durably; False if an intact identical one exists.

        A corrupt or different existing replica is replaced atomically.

        Raises:
            ChecksumError: ``zlib.crc32(data) != crc32`` (nothing is written).
            StorageError: bad shard id, or the file could not be written.
        """
        raw_id = validate_shard_id(shard_id)
        view = memoryview(data).cast("B")
        actual = zlib.crc32(view)
        if actual != crc32:
            msg = (
                f"shard {shard_id!r}: payload of {view.nbytes} bytes has crc32 "
                f"{actual:#010x}, the writer claims {crc32:#010x}; resend it"
            )
            raise ChecksumError(msg)
        current = self.has(shard_id)
        if current is not None and current.crc32 == crc32 and self._intact(shard_id):
            return False
        self._write(shard_id, raw_id, view, crc32)
        return True

    def _intact(self, shard_id: str) -> bool:
        try:
            return self.verify(shard_id)
        except ShardNotFoundError:
            return False

    def _write(
        self, shard_id: str, raw_id: bytes, view: memoryview, crc32: int
    ) -> None:
        final = self._path(shard_id)
        temp = self._replicas / f"{_TEMP_PREFIX}{secrets.token_hex(8)}"
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
            )
            try:
                _write_all(fd, memoryview(encode_header(raw_id, view.nbytes, crc32)))
                _write_all(fd, view)
                os.fsync(fd)
            finally:
                os.close(fd)
            with self._lock:
                os.replace(temp, final)
                old = self._index.get(shard_id)
                self._bytes += view.nbytes - (old.size if old else 0)
                self._index[shard_id] = ReplicaInfo(shard_id, view.nbytes, crc32)
            _fsync_dir(self._replicas)
        except OSError as exc:
            self._discard_temp(temp)
            msg = (
                f"cannot write replica of shard {shard_id!r} to {final}: {exc}; "
                "check free space and permissions of the data dir"
            )
            raise StorageError(msg) from exc

    @staticmethod
    def _discard_temp(temp: Path) -> None:
        try:
            temp.unlink(missing_ok=True)
        except OSError:
            logger.exception("cannot remove temp file %s", temp)

    def open_reader(self, shard_id: str, *, verify: bool = True) -> ReplicaReader:
        """Open a replica for chunked reading (the header is checked here).

        ``verify=False`` skips the payload crc32 (the length is still checked),
        for a caller whose reader checks the bytes end to end.

        Raises:
            ShardNotFoundError: no replica of the shard on this node.
            ChecksumError: the file header is corrupt or names another shard.
            StorageError: the file cannot be read.
        """
        path = self._path(shard_id)
        if self.has(shard_id) is None:
            raise self._not_found(shard_id)
        try:
            f = path.open("rb", buffering=0)
        except FileNotFoundError as exc:
            raise self._not_found(shard_id) from exc
        except OSError as exc:
            msg = f"cannot read replica of shard {shard_id!r} at {path}: {exc}"
            raise StorageError(msg) from exc
        try:
            info = read_header(f, path)
            if info.shard_id != shard_id:
                msg = f"replica file {path} holds shard {info.shard_id!r}"
                raise ChecksumError(msg)
            length = os.fstat(f.fileno()).st_size
            if length != f.tell() + info.size:
                msg = (
                    f"replica file {path} of shard {shard_id!r} is {length} bytes; "
                    f"its header promises {f.tell() + info.size}"
                )
                raise ChecksumError(msg)
        except BaseException:
            f.close()
            raise
        return ReplicaReader(f, path, info, verify=verify)

    def get(self, shard_id: str) -> bytes:
        """Return a replica's payload after checking its crc32.

        Raises:
            ShardNotFoundError: no replica of the shard on this node.
            ChecksumError: the replica is corrupt (it is kept for repair).
            StorageError: the file cannot be read.
        """
        return self.read(shard_id)[1]

    def read(self, shard_id: str, *, verify: bool = True) -> tuple[ReplicaInfo, bytes]:
        """Return a replica's header and payload (checked as :meth:`get` does).

        ``verify=False`` skips the payload crc32, as :meth:`open_reader`.

        Raises:
            ShardNotFoundError, ChecksumError, StorageError: as :meth:`get`.
        """
        with self.open_reader(shard_id, verify=verify) as reader:
            data = reader.read(reader.info.size)
            while not reader.done:  # a short read; rare on regular files
                data += reader.read(reader.remaining)
        return reader.info, data

    def iter_chunks(self, shard_id: str, chunk_bytes: int) -> Iterator[bytes]:
        """Yield a replica's payload in chunks; the crc32 is checked at the end.

        Raises:
            ShardNotFoundError, ChecksumError, StorageError: as :meth:`get`.
        """
        with self.open_reader(shard_id) as reader:
            while not reader.done:
                yield reader.read(chunk_bytes)

    def verify(self, shard_id: str) -> bool:
        """Return whether the replica's file reads back with its crc32.

        A replica that fails is moved to ``quarantine/`` and leaves the index, so
        ``has`` and ``list`` stop offering it and repair copies a good one here.

        Raises:
            ShardNotFoundError: no replica of the shard on this node.
        """
        try:
            for _ in self.iter_chunks(shard_id, _VERIFY_CHUNK):
                pass
        except ChecksumError as exc:
            logger.warning("verify failed: %s", exc)
            self._quarantine_replica(shard_id, str(exc))
            return False
        return True

    def _quarantine_replica(self, shard_id: str, problem: str) -> None:
        path = self._path(shard_id)
        with self._lock:
            info = self._index.pop(shard_id, None)
            if info is None:
                return
            self._bytes -= info.size
            try:
                self._move_to_quarantine(path, problem)
            except OSError as exc:
                logger.error("could not quarantine %s: %s", path, exc)

    def has(self, shard_id: str) -> ReplicaInfo | None:
        """Return the indexed replica of a shard, or None (no disk access)."""
        with self._lock:
            return self._index.get(shard_id)

    def delete(self, shard_id: str) -> bool:
        """Remove a replica; False if there was none.

        Raises:
            StorageError: the file could not be removed.
        """
        path = self._path(shard_id)
        with self._lock:
            info = self._index.pop(shard_id, None)
            if info is None:
                return False
            self._bytes -= info.size
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                msg = f"cannot delete replica of shard {shard_id!r} at {path}: {exc}"
                raise StorageError(msg) from exc
        _fsync_dir(self._replicas)
        return True

    def list(self, prefix: str = "") -> builtins.list[ReplicaInfo]:
        """Return the replicas whose shard id starts with ``prefix``, sorted by id."""
        with self._lock:
            found = [i for s, i in self._index.items() if s.startswith(prefix)]
        return sorted(found, key=lambda info: info.shard_id)

    def total_bytes(self) -> int:
        """Return the payload bytes of all indexed replicas."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)
