"""One replica file: its format, its name on disk, and a checked chunked reader.

A replica file is::

    b"SR3R" | version u8 | id length u16 | payload size u64 | payload crc32 u32
    | shard id (UTF-8) | header crc32 u32 | payload

:class:`sr3.storage.ReplicaStore` keeps these files; :class:`ReplicaReader`
streams one's payload and checks its crc32 at the end.
"""

from __future__ import annotations

import hashlib
import string
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final
from urllib.parse import unquote

from sr3.checksum import crc32
from sr3.errors import ChecksumError, StorageError

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_SHARD_ID_BYTES",
    "ReplicaInfo",
    "ReplicaReader",
    "encode_header",
    "file_size",
    "read_header",
    "replica_name",
    "shard_id_from_name",
    "validate_shard_id",
]

MAGIC: Final = b"SR3R"
FORMAT_VERSION: Final = 1
MAX_SHARD_ID_BYTES: Final = 4096
_FIXED: Final = struct.Struct(">4sBHQI")  # magic, version, id length, size, crc32
_HEADER_CRC: Final = struct.Struct(">I")
_SAFE: Final = frozenset(string.ascii_letters + string.digits + "-_.@#+=,")
_MAX_NAME: Final = 200  # well under NAME_MAX (255) so the quarantine suffix fits


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


def read_header(f: BinaryIO, path: Path) -> ReplicaInfo:
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


def file_size(info: ReplicaInfo) -> int:
    """Return the length of the replica file that holds ``info``'s payload."""
    return _FIXED.size + len(info.shard_id.encode()) + _HEADER_CRC.size + info.size


def encode_header(raw_id: bytes, size: int, crc32: int) -> bytes:
    """Return the header of a replica file (``crc32``: the payload's)."""
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
