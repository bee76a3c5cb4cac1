"""The project's exception hierarchy: one root, a few subsystem bases.

Every error names the object it concerns (shard id, node id, znode path) and the
likely fix. ``retriable`` tells callers whether trying again may succeed.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "ChecksumError",
    "CodecError",
    "ConfigError",
    "CoordinationError",
    "NodeUnavailableError",
    "ProtocolError",
    "QuorumError",
    "RecoveryError",
    "RingError",
    "SR3Error",
    "SessionLostError",
    "ShardNotFoundError",
    "StateError",
    "StorageError",
    "ZooKeeperMissingError",
]


class SR3Error(Exception):
    """Root of every error this project raises on purpose."""

    retriable: bool = False


class ConfigError(SR3Error, ValueError):
    """A configuration value is missing, malformed or out of range."""


class CodecError(SR3Error, ValueError):
    """Bytes could not be encoded or decoded (wrong version, bad layout)."""


class ChecksumError(CodecError):
    """Bytes failed their checksum: the copy is corrupt and must be re-fetched."""

    retriable = True


class StateError(SR3Error):
    """Keyed state was used in a way its lifecycle does not allow."""


class RingError(SR3Error):
    """The hash ring cannot place a shard (too few nodes, unknown node)."""


class StorageError(SR3Error):
    """A ring node could not store or serve a shard replica."""


class ShardNotFoundError(StorageError, KeyError):
    """No live replica of a shard could be found."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ProtocolError(StorageError):
    """A peer sent a frame that breaks the wire protocol."""


class AuthenticationError(StorageError):
    """The HMAC challenge failed: the shared secrets differ."""


class NodeUnavailableError(StorageError):
    """A ring node could not be reached or closed the connection."""

    retriable = True


class QuorumError(StorageError):
    """Fewer replicas than the write quorum acknowledged a write."""

    retriable = True


class RecoveryError(SR3Error):
    """A snapshot could not be recovered."""


class CoordinationError(SR3Error):
    """ZooKeeper coordination failed (connection, session, znode conflict)."""

    retriable = True


class SessionLostError(CoordinationError):
    """The ZooKeeper session expired; ephemeral znodes are gone."""


class ZooKeeperMissingError(CoordinationError):
    """Debian's zookeeper package is not installed."""

    retriable = False
