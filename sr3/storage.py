"""A ring node's durable replica store: one immutable, checksummed file per replica.

Layout under ``data_dir``: ``replicas/<name>`` holds live replicas, where
``<name>`` is :func:`replica_name` of the shard id; ``quarantine/`` receives
files whose header is unreadable at start-up. A replica file is::

    b"SR3R" | version u8 | id length u16 | payload size u64 | payload crc32 u32
    | shard id (UTF-8) | header crc32 u32 | payload

Writes go to a dot-prefixed temp file in ``replicas/``, are fsynced, renamed over
the final name and the directory is fsynced, so a crash at any point leaves
either the old replica or the new one under the final name, never a half file.
"""

from __future__ import annotations

import builtins
import ctypes
import hashlib
import logging
import os
import secrets
import string
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import unquote

from sr3.errors import ChecksumError, ShardNotFoundError, StorageError

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_SHARD_ID_BYTES",
    "ReplicaInfo",
    "ReplicaReader",
    "ReplicaStore",
    "crc32",
    "replica_name",
    "shard_id_from_name",
    "validate_shard_id",
]

logger = logging.getLogger(__name__)

MAGIC = b"SR3R"
FORMAT_VERSION = 1
MAX_SHARD_ID_BYTES = 4096
_FIXED = struct.Struct(">4sBHQI")  # magic, version, id length, payload size, crc32
_HEADER_CRC = struct.Struct(">I")
_TEMP_PREFIX = ".tmp-"
_SAFE = frozenset(string.ascii_letters + string.digits + "-_.@#+=,")
_MAX_NAME = 200  # well under NAME_MAX (255) so the quarantine suffix fits
_VERIFY_CHUNK = 1024 * 1024


_LIBDEFLATE = "libdeflate.so.0"
_FAST_CRC_MIN_BYTES = 64 * 1024  # below this the ctypes call costs more than it saves
_CrcFn = Callable[[int, bytes | int, int], int]


def _load_fast_crc32() -> _CrcFn | None:
    """Return libdeflate's crc32 (folding with carry-less multiplies), or None.

    It computes exactly ``zlib.crc32`` several times faster and releases the GIL
    as ``zlib.crc32`` does. Checked against ``zlib.crc32`` before use.
    """
    try:
        fn = ctypes.CDLL(_LIBDEFLATE).libdeflate_crc32
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_uint32
    probe = bytes(range(256)) * 1031
    if fn(0, probe, len(probe)) != zlib.crc32(probe) or fn(
        0x1234ABCD, probe, 77
    ) != zlib.crc32(probe[:77], 0x1234ABCD):
        logger.warning("%s computes another crc32 than zlib; not used", _LIBDEFLATE)
        return None
    checked: _CrcFn = fn
    return checked


_fast_crc32 = _load_fast_crc32()


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return ``zlib.crc32(data, value)``, the checksum replicas and manifests record.

    Large ``bytes`` and writable contiguous buffers go through libdeflate when
    the system has it (the read path checks every payload it receives; zlib's
    crc32 was its largest cost).
    """
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if _fast_crc32 is None or size < _FAST_CRC_MIN_BYTES:
        return zlib.crc32(data, value)
    if type(data) is bytes:
        return _fast_crc32(value, data, size)
    try:
        # the buffer's first byte, for its address: read-only or strided buffers
        # refuse (zlib takes them). Not ``(c_char * size).from_buffer``: ctypes
        # creates and caches an array type per size, 30 us each, for ever, and
        # a socket reader sees thousands of sizes.
        first = ctypes.c_char.from_buffer(data)
    except (TypeError, ValueError):
        return zlib.crc32(data, value)
    # ``first`` holds the buffer exported until the call returns
    return _fast_crc32(value, ctypes.addressof(first), size)


@dataclass(frozen=True)
class ReplicaInfo:
    """A stored replica as the index knows it.

    Attributes:
        shard_id: Ring-wide shard id.
        size: Payload bytes.
        crc32: ``zlib.crc32`` of the payload, as recorded in the file header.
    """

    shard_id: str
    size: int
    crc32: int


def validate_shard_id(shard_id: object) -> bytes:
    """Return the UTF-8 bytes of a usable shard id.

    Raises:
        StorageError: not a non-empty string of at most 4096 UTF-8 bytes.
    """
    if not isinstance(shard_id, str) or not shard_id:
        msg = f"shard id must be a non-empty string, got {type(shard_id).__name__}"
        raise StorageError(msg)
    try:
        raw = shard_id.encode()
    except UnicodeEncodeError as exc:
        msg = f"shard id {shard_id!r} is not encodable as UTF-8"
        raise StorageError(msg) from exc
    if len(raw) > MAX_SHARD_ID_BYTES:
        msg = f"shard id of {len(raw)} bytes exceeds {MAX_SHARD_ID_BYTES} bytes"
        raise StorageError(msg)
    return raw


def replica_name(shard_id: str) -> str:
    """Return the file name of a shard's replica (reversible unless very long).

    Characters outside ``[A-Za-z0-9-_.@#+=,]`` and a leading dot become ``%XX``
    per UTF-8 byte; names longer than 200 characters become ``%H<sha256>``
    (the id is still in the file header).
    """
    raw = validate_shard_id(shard_id)
    name = "".join(chr(b) if chr(b) in _SAFE else f"%{b:02X}" for b in raw)
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > _MAX_NAME:
        name = "%H" + hashlib.sha256(raw).hexdigest()
    return name


def shard_id_from_name(name: str) -> str | None:
    """Invert :func:`replica_name`; None for hashed (long-id) names."""
    if name.startswith("%H"):
        return None
    return unquote(name, errors="strict")


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


def _read_header(f: BinaryIO, path: Path) -> ReplicaInfo:
    """Read and check a replica header; raise ChecksumError if it is bad."""
    fixed = f.read(_FIXED.size)
    if len(fixed) < _FIXED.size:
        msg = f"replica file {path} is truncated inside its header"
        raise ChecksumError(msg)
    magic, version, id_len, size, crc = _FIXED.unpack(fixed)
    if magic != MAGIC or version != FORMAT_VERSION:
        msg = (
            f"replica file {path} has magic {magic!r} version {version}; "
            f"this build reads {MAGIC!r} version {FORMAT_VERSION}"
        )
        raise ChecksumError(msg)
    rest = f.read(id_len + _HEADER_CRC.size)
    if len(rest) < id_len + _HEADER_CRC.size:
        msg = f"replica file {path} is truncated inside its header"
        raise ChecksumError(msg)
    (header_crc,) = _HEADER_CRC.unpack(rest[id_len:])
    if zlib.crc32(rest[:id_len], zlib.crc32(fixed)) != header_crc:
        msg = f"replica file {path} has a corrupt header (header checksum differs)"
        raise ChecksumError(msg)
    try:
        shard_id = rest[:id_len].decode()
    except UnicodeDecodeError as exc:
        msg = f"replica file {path} has a shard id that is not UTF-8"
        raise ChecksumError(msg) from exc
    return ReplicaInfo(shard_id, size, crc)


def _encode_header(raw_id: bytes, size: int, crc32: int) -> bytes:
    fixed = _FIXED.pack(MAGIC, FORMAT_VERSION, len(raw_id), size, crc32)
    return fixed + raw_id + _HEADER_CRC.pack(zlib.crc32(raw_id, zlib.crc32(fixed)))


class ReplicaReader:
    """Reads one replica's payload in chunks, checking its crc32 at the end.

    Obtain it from :meth:`ReplicaStore.open_reader` and use it as a context
    manager. :meth:`read` raises :class:`ChecksumError` when the final chunk
    leaves the payload with a crc32 other than the header's, so a caller that
    forwards chunks can withhold the last one.
    """

    def __init__(
        self, f: BinaryIO, path: Path, info: ReplicaInfo, *, verify: bool = True
    ) -> None:
        self._f = f
        self.path = path
        self.info = info
        self.verify = verify
        self.remaining = info.size
        self.done = False
        self._crc = 0

    def read(self, max_bytes: int) -> bytes:
        """Return the next chunk of at most ``max_bytes``; b"" once done.

        The call that reaches the end of the payload checks the file length and
        crc32 and sets :attr:`done` (for an empty payload that is the first call).

        Raises:
            ChecksumError: the file is truncated, too long or fails its crc32.
        """
        if self.done:
            return b""
        chunk = b""
        if self.remaining:
            chunk = self._f.read(min(max_bytes, self.remaining))
            if not chunk:
                self._corrupt(f"ends {self.remaining} bytes early")
            self.remaining -= len(chunk)
            if self.verify:
                self._crc = crc32(chunk, self._crc)
        if self.remaining == 0:
            if self._f.read(1):
                self._corrupt("has bytes after its payload")
            if self.verify and self._crc != self.info.crc32:
                self._corrupt(f"has crc32 {self._crc:#010x}")
            self.done = True
        return chunk

    def fileno(self) -> int:
        """Return the file's descriptor, for a zero-copy sender (``os.sendfile``).

        Bytes sent that way from :attr:`offset` skip :meth:`read`, hence the
        crc32 check: only a caller whose receiver checks the payload end to end
        against the header's crc32 may send them (the length was checked when
        the reader was opened).
        """
        return self._f.fileno()

    @property
    def offset(self) -> int:
        """File offset of the next unread payload byte."""
        return self._f.tell()

    def _corrupt(self, what: str) -> None:
        msg = (
            f"replica of shard {self.info.shard_id!r} in {self.path} {what}; "
            f"expected {self.info.size} bytes with crc32 {self.info.crc32:#010x}. "
            "The file is kept until repair overwrites it from another replica"
        )
        raise ChecksumError(msg)

    def close(self) -> None:
        """Close the file."""
        self._f.close()

    def __enter__(self) -> ReplicaReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
                    info = _read_header(f, path)
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
        expected = _FIXED.size + len(info.shard_id.encode()) + _HEADER_CRC.size
        if path.stat().st_size != expected + info.size:
            return f"replica file {path} is not {expected + info.size} bytes long"
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
                _write_all(fd, memoryview(_encode_header(raw_id, view.nbytes, crc32)))
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
            info = _read_header(f, path)
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
