"""Snapshot metadata: which shards make up an owner's snapshot at an epoch, and where.

An *owner* is whatever holds keyed state (a Storm task, a Spark state partition, or a
synthetic snapshot written by ``sr3 snapshot put``). Its snapshot at epoch ``e`` is a
base plus deltas: ``Manifest.shard_ids`` lists them oldest first, and applying them in
order rebuilds the state. ``ShardMeta.holders`` names the ring nodes with a replica;
repair rewrites it as nodes come and go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sr3.errors import CodecError

__all__ = ["Manifest", "ShardMeta", "shard_id_for"]


def shard_id_for(owner: str, epoch: int, seq: int) -> str:
    """Return the ring-wide id of shard ``seq`` written by ``owner`` at ``epoch``."""
    return f"{owner}@{epoch}#{seq}"


@dataclass(frozen=True)
class ShardMeta:
    """One shard: a run of encoded key groups, the unit of placement and transfer.

    Attributes:
        shard_id: Ring-wide id (see :func:`shard_id_for`).
        owner: Owner that wrote it.
        epoch: Epoch that wrote it.
        size: Bytes of the shard payload.
        crc32: ``zlib.crc32`` of the payload.
        key_groups: Key groups encoded in it.
        kind: ``"full"`` (replaces the key groups) or ``"delta"`` (upserts and deletes).
        holders: Ring nodes holding a replica, preference-list order first.
        spans: Where each key group's blob lies in the payload, aligned with
            ``key_groups``: ``(offset, length, crc32)``, so one key group can
            be read and checked alone (:meth:`span`). Empty in shards written
            before spans were recorded: those are read whole.
    """

    shard_id: str
    owner: str
    epoch: int
    size: int
    crc32: int
    key_groups: tuple[int, ...] = ()
    kind: str = "full"
    holders: tuple[str, ...] = ()
    spans: tuple[tuple[int, int, int], ...] = ()

    def span(self, key_group: int) -> tuple[int, int, int] | None:
        """Return ``(offset, length, crc32)`` of ``key_group``'s blob, or None.

        None: the shard records no spans, or does not hold ``key_group``.
        """
        if len(self.spans) != len(self.key_groups):
            return None
        try:
            return self.spans[self.key_groups.index(key_group)]
        except ValueError:
            return None

    def with_holders(self, holders: Sequence[str]) -> ShardMeta:
        """Return a copy with ``holders`` replaced."""
        return replace(self, holders=tuple(holders))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON/msgpack-friendly dict."""
        return {
            "shard_id": self.shard_id,
            "owner": self.owner,
            "epoch": self.epoch,
            "size": self.size,
            "crc32": self.crc32,
            "key_groups": list(self.key_groups),
            "kind": self.kind,
            "holders": list(self.holders),
            **({"spans": [list(span) for span in self.spans]} if self.spans else {}),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ShardMeta:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                shard_id=str(raw["shard_id"]),
                owner=str(raw["owner"]),
                epoch=int(raw["epoch"]),
                size=int(raw["size"]),
                crc32=int(raw["crc32"]),
                key_groups=tuple(int(k) for k in raw.get("key_groups", ())),
                kind=str(raw.get("kind", "full")),
                holders=tuple(str(h) for h in raw.get("holders", ())),
                spans=tuple(
                    (int(o), int(n), int(c)) for o, n, c in raw.get("spans", ())
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed shard metadata {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc


@dataclass(frozen=True)
class Manifest:
    """An owner's snapshot at one epoch.

    Attributes:
        owner: Owner name (``topology/component/task`` for Storm tasks).
        epoch: The epoch this manifest commits.
        key_group_count: G, fixed for the owner on its first epoch.
        shard_ids: Shards to apply in order: the base first, then deltas.
        base_epoch: Epoch of the full snapshot the chain starts from.
        offsets: Input and output positions (spout offsets, sequence numbers).
        created_at: Wall-clock seconds since the epoch when it was published.
        extra: Free-form metadata (generator parameters, engine, batch id).
    """

    owner: str
    epoch: int
    key_group_count: int
    shard_ids: tuple[str, ...]
    base_epoch: int
    offsets: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def chain_length(self) -> int:
        """Number of epochs in the base-plus-deltas chain."""
        return self.epoch - self.base_epoch + 1

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON/msgpack-friendly dict."""
        return {
            "owner": self.owner,
            "epoch": self.epoch,
            "key_group_count": self.key_group_count,
            "shard_ids": list(self.shard_ids),
            "base_epoch": self.base_epoch,
            "offsets": dict(self.offsets),
            "created_at": self.created_at,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Manifest:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                owner=str(raw["owner"]),
                epoch=int(raw["epoch"]),
                key_group_count=int(raw["key_group_count"]),
                shard_ids=tuple(str(s) for s in raw["shard_ids"]),
                base_epoch=int(raw["base_epoch"]),
                offsets=dict(raw.get("offsets", {})),
                created_at=float(raw.get("created_at", 0.0)),
                extra=dict(raw.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed manifest {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc
