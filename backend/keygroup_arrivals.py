"""Which key groups of a lazily restored chain arrived whole, and their blobs.

:class:`KeyGroupArrivals` is the bookkeeping of :class:`~backend.lazy.ChainLoader`:
each key group's shards (its chain), the shards read whole, the key groups a
transfer or an on-demand read delivered whole, and the key groups complete but
not handed out yet. A key group is complete once, from whichever path brought
it whole first. It takes no lock: the loader calls it under its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sr3.manifest import ShardMeta

__all__ = ["KeyGroupArrivals"]

Blob = bytes | memoryview


class KeyGroupArrivals:
    """What of one owner's chain arrived, key group by key group.

    Args:
        metas: Shard records of the chain's shards to read, in chain order
            (oldest first).
    """

    def __init__(self, metas: Mapping[str, ShardMeta]) -> None:
        self._order = list(metas)
        #: each key group's shards, oldest first (the chain's order)
        self._chains: dict[int, list[str]] = {}
        for sid, meta in metas.items():
            for kg in meta.key_groups:
                self._chains.setdefault(kg, []).append(sid)
        #: key groups still to come from each shard
        self._waiting: dict[int, int] = {kg: len(c) for kg, c in self._chains.items()}
        #: key groups complete (handed out or ready to be)
        self._whole: set[int] = set()
        #: blobs of key groups delivered whole, not handed out yet
        self._delivered: dict[int, list[Blob]] = {}
        #: blobs of the shards read whole, by key group, not handed out yet
        self._arrived: dict[str, dict[int, Blob]] = {}
        #: key groups complete and not handed out yet
        self._complete: list[int] = []

    @property
    def key_groups(self) -> frozenset[int]:
        """Every key group the chain holds."""
        return frozenset(self._chains)

    def chain(self, kg: int) -> list[str]:
        """The shards holding ``kg``, oldest first (empty: the chain has none)."""
        return self._chains.get(kg, [])

    def is_whole(self, kg: int) -> bool:
        """Whether ``kg`` is complete (handed out or ready to be)."""
        return kg in self._whole

    def all_whole(self) -> bool:
        """Whether every key group of the chain is complete."""
        return len(self._whole) == len(self._chains)

    def has_shard(self, sid: str) -> bool:
        """Whether shard ``sid`` was read whole."""
        return sid in self._arrived

    def blobs_here(self, kg: int) -> dict[str, Blob]:
        """``kg``'s blobs in the shards read whole and not handed out, by shard."""
        return {
            sid: self._arrived[sid][kg]
            for sid in self.chain(kg)
            if kg in self._arrived.get(sid, {})
        }

    def shards_left(self) -> list[str]:
        """Shards of the key groups not complete yet, chain order."""
        wanted = {
            sid
            for kg, chain in self._chains.items()
            if kg not in self._whole
            for sid in chain
        }
        return [sid for sid in self._order if sid in wanted]

    def deliver(self, kg: int, blobs: list[Blob], *, drop_arrived: bool) -> bool:
        """Take ``kg`` whole from ``blobs`` unless it already is; True: taken.

        ``drop_arrived``: drop ``kg``'s blob from the shards read whole first
        (a key group read alone, while the background brought a shard of it
        meanwhile: else that shard's buffer would stay referenced).
        """
        if kg in self._whole or kg not in self._chains:
            return False
        if drop_arrived:
            for sid in self._chains[kg]:
                self._arrived.get(sid, {}).pop(kg, None)
        self._whole.add(kg)
        self._delivered[kg] = blobs
        self._complete.append(kg)
        return True

    def add_shard(
        self, sid: str, blobs: Mapping[int, Blob], key_groups: Iterable[int]
    ) -> None:
        """Record shard ``sid`` read whole: its ``blobs``, of the ``key_groups`` in it.

        A key group already complete (the transfer delivered it) is not
        installed twice: its blob is not kept.
        """
        self._arrived[sid] = {
            kg: blob for kg, blob in blobs.items() if kg not in self._whole
        }
        for kg in key_groups:
            self._waiting[kg] -= 1
            if self._waiting[kg] == 0 and kg not in self._whole:
                self._whole.add(kg)
                self._complete.append(kg)

    def hand_out(self) -> dict[int, list[Blob]]:
        """Every key group complete and not handed out yet, with its blobs."""
        out: dict[int, list[Blob]] = {}
        wanted, self._complete = self._complete, []
        for kg in wanted:
            delivered = self._delivered.pop(kg, None)
            if delivered is not None:
                out[kg] = delivered
            else:
                out[kg] = [self._arrived[sid].pop(kg) for sid in self._chains[kg]]
        return out
