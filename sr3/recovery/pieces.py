"""Key-group pieces in transit, their merging, and their assembly at the recovering R.

A *piece* is one key group's blob folded over a run of consecutive epochs of that
key group's chain: the epochs of the manifest in which the key group has a blob,
ascending. A shard of epoch ``e`` contributes one single-epoch piece per key group
it holds. Tree recovery folds adjacent pieces on the way to R; a piece therefore
carries its epoch range ``lo..hi``, and two pieces fold only when no epoch of the
key group's chain lies between them, so deltas are always applied in order.

R tracks coverage per *cell* (key group, epoch): a piece whose cells are all held
already is a duplicate and dropped; the shards owning cells nobody delivered are
re-fetched. Every delivered cell is verified by a checksum on the way in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sr3.checksum import crc32
from sr3.codec import decode_shard, merge_key_group_blobs
from sr3.errors import ChecksumError, CodecError, RecoveryError
from sr3.manifest import Manifest, ShardMeta

__all__ = [
    "Assembly",
    "ChainIndex",
    "Piece",
    "cells_of",
    "merge_pieces",
    "pieces_of_shard",
    "shard_metas_in_order",
]

logger = logging.getLogger(__name__)

Blob = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Piece:
    """One key group's blob over the epochs ``lo..hi`` of its chain.

    Attributes:
        kg: Key group.
        lo: First epoch folded in.
        hi: Last epoch folded in (``lo`` for a piece read from one shard).
        blob: The encoded key-group blob (FULL if the run starts at a FULL blob).
    """

    kg: int
    lo: int
    hi: int
    blob: Blob


class ChainIndex:
    """Per key group, the epochs of a manifest's chain holding a blob of it.

    Built from the manifest's shards in chain order; it is what decides whether two
    pieces are adjacent, and which shard owns a cell.

    Args:
        shards: ``(shard_id, epoch, key_groups)`` of every shard of the chain.

    Raises:
        RecoveryError: two shards of one epoch claim the same key group.
    """

    def __init__(self, shards: Iterable[tuple[str, int, Sequence[int]]]) -> None:
        self._shard_of: dict[tuple[int, int], str] = {}
        self._shards: dict[str, tuple[int, tuple[int, ...]]] = {}
        epochs: dict[int, set[int]] = {}
        for shard_id, epoch, key_groups in shards:
            self._shards[shard_id] = (epoch, tuple(key_groups))
            for kg in key_groups:
                other = self._shard_of.setdefault((kg, epoch), shard_id)
                if other != shard_id:
                    msg = (
                        f"shards {other} and {shard_id} both hold key group {kg} of "
                        f"epoch {epoch}; the manifest is inconsistent: rewrite the "
                        "epoch"
                    )
                    raise RecoveryError(msg)
                epochs.setdefault(kg, set()).add(epoch)
        self._epochs = {kg: sorted(es) for kg, es in epochs.items()}
        self._position = {
            (kg, e): i for kg, es in self._epochs.items() for i, e in enumerate(es)
        }

    @classmethod
    def of(cls, shards: Iterable[ShardMeta]) -> ChainIndex:
        """Build from shard metadata."""
        return cls((s.shard_id, s.epoch, s.key_groups) for s in shards)

    def to_wire(self) -> list[list[Any]]:
        """Return a msgpack-friendly form (``from_wire`` inverts it)."""
        return [[sid, e, list(kgs)] for sid, (e, kgs) in self._shards.items()]

    @classmethod
    def from_wire(cls, rows: Any) -> ChainIndex:
        """Build from :meth:`to_wire` output.

        Raises:
            CodecError: the rows are malformed.
        """
        try:
            return cls((str(s), int(e), [int(k) for k in kgs]) for s, e, kgs in rows)
        except (TypeError, ValueError) as exc:
            msg = f"malformed chain index in a relay request: {exc}"
            raise CodecError(msg) from exc

    @property
    def key_groups(self) -> list[int]:
        """Key groups with at least one blob in the chain, ascending."""
        return sorted(self._epochs)

    def epochs(self, kg: int) -> list[int]:
        """Return the chain of ``kg``: epochs holding a blob of it, ascending."""
        return self._epochs.get(kg, [])

    def span(self, kg: int, lo: int, hi: int) -> range:
        """Return the chain positions ``lo..hi`` cover.

        Raises:
            RecoveryError: ``lo`` or ``hi`` is not an epoch of the key group's chain.
        """
        first = self._position.get((kg, lo))
        last = self._position.get((kg, hi))
        if first is None or last is None or last < first:
            msg = (
                f"piece of key group {kg} over epochs {lo}..{hi} does not fit its "
                f"chain {self.epochs(kg)}; the sender runs another manifest"
            )
            raise RecoveryError(msg)
        return range(first, last + 1)

    def adjacent(self, kg: int, hi: int, lo: int) -> bool:
        """Return whether epoch ``lo`` directly follows ``hi`` in ``kg``'s chain."""
        before = self._position.get((kg, hi))
        after = self._position.get((kg, lo))
        return before is not None and after is not None and after == before + 1

    def shard_of(self, kg: int, position: int) -> str:
        """Return the shard holding the cell at ``position`` of the chain of ``kg``."""
        return self._shard_of[(kg, self._epochs[kg][position])]

    def epoch_of(self, shard_id: str) -> int | None:
        """Return the epoch of a shard of the chain, or None if it is not in it."""
        entry = self._shards.get(shard_id)
        return None if entry is None else entry[0]

    def shard_cells(self, shard_id: str) -> list[tuple[int, int]]:
        """Return the (key group, epoch) cells a shard holds."""
        epoch, kgs = self._shards[shard_id]
        return [(kg, epoch) for kg in kgs]


def merge_pieces(pieces: Iterable[Piece], chains: ChainIndex) -> list[Piece]:
    """Fold every run of adjacent pieces per key group into one piece.

    Pieces of a key group are sorted by epoch; a piece extends the current run when
    its ``lo`` directly follows the run's ``hi`` in the chain. Folding uses
    :func:`sr3.codec.merge_key_group_blobs`, which drops entries a later epoch
    overwrote or deleted. Pieces that are not adjacent stay separate, so nothing is
    ever applied out of order.

    Returns:
        The folded pieces in (key group, epoch) order.

    Raises:
        RecoveryError: two pieces overlap (the sender duplicated a cell).
        CodecError: a blob is malformed.
    """
    by_kg: dict[int, list[Piece]] = {}
    for piece in pieces:
        by_kg.setdefault(piece.kg, []).append(piece)
    out: list[Piece] = []
    for kg in sorted(by_kg):
        run: list[Piece] = []
        for piece in sorted(by_kg[kg], key=lambda p: p.lo):
            if run and chains.adjacent(kg, run[-1].hi, piece.lo):
                run.append(piece)
                continue
            if run and piece.lo <= run[-1].hi:
                msg = (
                    f"pieces of key group {kg} overlap: epochs {run[-1].lo}.."
                    f"{run[-1].hi} and {piece.lo}..{piece.hi}"
                )
                raise RecoveryError(msg)
            if run:
                out.append(_fold(run))
            run = [piece]
        out.append(_fold(run))
    return out


def _fold(run: list[Piece]) -> Piece:
    if len(run) == 1:
        return run[0]
    blob = merge_key_group_blobs([p.blob for p in run])
    return Piece(run[0].kg, run[0].lo, run[-1].hi, blob)


def pieces_of_shard(
    data: Blob, meta: ShardMeta, *, min_kg: int = 0, verified: bool = False
) -> list[Piece]:
    """Verify a shard and return one piece per key group (``kg >= min_kg``).

    ``verified`` says the payload already matched ``meta.crc32``.

    Raises:
        ChecksumError: the shard fails its checksum.
        CodecError: the shard is malformed or is not the shard ``meta`` describes.
    """
    decoded = decode_shard(data, shard_id=meta.shard_id, verified=verified)
    if decoded.epoch != meta.epoch or decoded.owner != meta.owner:
        msg = (
            f"{meta.shard_id}: the payload is {decoded.owner}@{decoded.epoch}, not "
            f"{meta.owner}@{meta.epoch}; the replica is misfiled, repair the holder"
        )
        raise CodecError(msg)
    return [
        Piece(kg, meta.epoch, meta.epoch, blob)
        for kg, blob in sorted(decoded.key_groups.items())
        if kg >= min_kg
    ]


class Assembly:
    """R's view of a recovery: which cells arrived, from whom, and what is missing.

    Thread-safe: star recovery adds shards from several threads.

    Args:
        manifest: The snapshot being recovered.
        shards: Metadata of every shard of the manifest, in chain order.
        on_key_group: Called with a key group and its blobs in epoch order as
            soon as its last cell arrives (outside the lock), so a consumer can
            take key groups while the transfer still runs (the lazy restore).
    """

    def __init__(
        self,
        manifest: Manifest,
        shards: Sequence[ShardMeta],
        *,
        on_key_group: Callable[[int, list[Blob]], None] | None = None,
    ) -> None:
        self.manifest = manifest
        self._on_key_group = on_key_group
        self.metas = {s.shard_id: s for s in shards}
        self.chains = ChainIndex.of(shards)
        self._lock = threading.Lock()
        self._covered: dict[int, dict[int, Piece]] = {}  # kg -> first position
        self._cells: dict[int, set[int]] = {}
        self.duplicates = 0
        self.conflicts = 0
        self.bytes_received = 0

    def add_shard(self, shard_id: str, data: Blob, *, crc_checked: bool) -> int:
        """Add a whole shard; return how many of its cells were new.

        Args:
            shard_id: The shard.
            data: Its payload.
            crc_checked: The transport already checked the payload against the
                manifest's crc32 (else it is checked here).

        Raises:
            ChecksumError: the payload fails a checksum.
            CodecError: the payload is malformed or another shard's.
        """
        meta = self.metas[shard_id]
        if not crc_checked and crc32(data) != meta.crc32:
            msg = (
                f"{shard_id}: received bytes fail the manifest's crc32 "
                f"{meta.crc32:#010x}; read another replica"
            )
            raise ChecksumError(msg)
        with self._lock:
            self.bytes_received += len(data)
        pieces = pieces_of_shard(data, meta, verified=True)
        return sum(self.add_piece(p, size=0) for p in pieces)

    def add_piece(self, piece: Piece, *, size: int | None = None) -> bool:
        """Add a piece; return False when it was a duplicate or conflicts.

        Args:
            piece: The piece.
            size: Bytes to count as received (default: the blob's size).

        Raises:
            RecoveryError: the piece does not fit its key group's chain.
        """
        span = self.chains.span(piece.kg, piece.lo, piece.hi)
        with self._lock:
            self.bytes_received += len(piece.blob) if size is None else size
            cells = self._cells.setdefault(piece.kg, set())
            held = sum(1 for pos in span if pos in cells)
            if held == len(span):
                self.duplicates += 1
                return False
            if held:
                # Cannot happen within one round; dropping keeps R exact, and the
                # missing cells are fetched again from single-epoch shards.
                self.conflicts += 1
                logger.warning(
                    "piece of key group %s epochs %s..%s overlaps cells held; dropped",
                    piece.kg,
                    piece.lo,
                    piece.hi,
                )
                return False
            cells.update(span)
            pieces = self._covered.setdefault(piece.kg, {})
            pieces[span.start] = piece
            whole = len(cells) == len(self.chains.epochs(piece.kg))
            blobs = [pieces[pos].blob for pos in sorted(pieces)] if whole else []
        if whole and self._on_key_group is not None:
            self._on_key_group(piece.kg, blobs)
        return True

    def missing_shards(self) -> list[str]:
        """Return the shards owning a cell not delivered yet, in chain order."""
        with self._lock:
            missing: set[str] = set()
            for kg in self.chains.key_groups:
                cells = self._cells.get(kg, set())
                for pos in range(len(self.chains.epochs(kg))):
                    if pos not in cells:
                        missing.add(self.chains.shard_of(kg, pos))
        return [sid for sid in self.metas if sid in missing]

    @property
    def complete(self) -> bool:
        """Whether every cell of the chain was delivered."""
        return not self.missing_shards()

    def layers(self) -> dict[int, list[Blob]]:
        """Return each key group's blobs in epoch order, ready to install.

        Raises:
            RecoveryError: cells are still missing.
        """
        missing = self.missing_shards()
        if missing:
            msg = f"recovery of {self.manifest.owner} is missing shards {missing[:5]}"
            raise RecoveryError(msg)
        with self._lock:
            return {
                kg: [pieces[pos].blob for pos in sorted(pieces)]
                for kg, pieces in sorted(self._covered.items())
            }

    def install_order(self) -> list[dict[int, Blob]]:
        """Return the blobs as layers: layer ``i`` holds each key group's i-th blob.

        ``KeyedState.install`` applied layer by layer rebuilds the state exactly.
        """
        layers: list[dict[int, Blob]] = []
        for kg, blobs in self.layers().items():
            for i, blob in enumerate(blobs):
                if i == len(layers):
                    layers.append({})
                layers[i][kg] = blob
        return layers


def cells_of(pieces: Iterable[Piece], chains: ChainIndex) -> dict[int, list[int]]:
    """Return the chain positions each key group's pieces cover (for tests)."""
    out: dict[int, list[int]] = {}
    for piece in pieces:
        out.setdefault(piece.kg, []).extend(chains.span(piece.kg, piece.lo, piece.hi))
    return {kg: sorted(v) for kg, v in out.items()}


def shard_metas_in_order(
    manifest: Manifest, shards: Mapping[str, ShardMeta]
) -> list[ShardMeta]:
    """Return the manifest's shard records in chain order.

    Raises:
        RecoveryError: the manifest lists a shard with no record.
    """
    missing = [sid for sid in manifest.shard_ids if sid not in shards]
    if missing:
        msg = (
            f"manifest {manifest.owner}@{manifest.epoch} lists shards with no record "
            f"{missing[:5]}; the manifest store is inconsistent, run `sr3 status`"
        )
        raise RecoveryError(msg)
    return [shards[sid] for sid in manifest.shard_ids]
