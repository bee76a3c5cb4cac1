"""Which shards of a lazily restored chain are queued, being read, or failed.

:class:`ShardFetches` is the read schedule of :class:`~backend.lazy.ChainLoader`:
the background queue (shards by their lowest key group, so key groups arrive
in order), the shards some thread is reading now (a shard is read by one
thread at a time), and the last error of each shard whose read failed. It
takes no lock: the loader calls it under its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from sr3.manifest import ShardMeta

__all__ = ["ShardFetches"]


class ShardFetches:
    """The reads of one owner's chain, shard by shard.

    Args:
        metas: Shard records of the chain's shards to read; all of them are
            queued.
    """

    def __init__(self, metas: Mapping[str, ShardMeta]) -> None:
        self._metas = metas
        self._busy: set[str] = set()
        self._failed: dict[str, BaseException] = {}
        self._queue: list[str] = []
        self.queue(metas)

    def queue(self, sids: Iterable[str]) -> None:
        """Queue ``sids`` for the background instead of what was queued.

        Background order: shards by their lowest key group (key-group order).
        """
        self._queue = sorted(
            sids,
            key=lambda sid: (min(self._metas[sid].key_groups, default=0), sid),
        )
        self._queue.reverse()  # popped from the end

    def claim(self, sids: Iterable[str]) -> list[str]:
        """Mark those of ``sids`` nobody reads as being read; return them.

        Their earlier failures are forgotten: they are read again.
        """
        claimed = [s for s in sids if s not in self._busy]
        for sid in claimed:
            self._busy.add(sid)
            self._failed.pop(sid, None)
        return claimed

    def next_queued(self, skip: Callable[[str], bool]) -> str | None:
        """Take the next queued shard nobody reads, marked as being read.

        Shards ``skip`` is true of (read already) are dropped from the queue.
        None: the queue is empty.
        """
        while self._queue:
            candidate = self._queue.pop()
            if not skip(candidate) and candidate not in self._busy:
                self._busy.add(candidate)
                return candidate
        return None

    def any_busy(self, sids: Iterable[str]) -> bool:
        """Whether some thread is reading one of ``sids``."""
        return any(sid in self._busy for sid in sids)

    def done(self, sid: str) -> None:
        """Record that the read of ``sid`` succeeded."""
        self._busy.discard(sid)

    def fail(self, sid: str, error: BaseException) -> None:
        """Record that the read of ``sid`` failed with ``error``."""
        self._busy.discard(sid)
        self._failed[sid] = error

    def failure(self, sid: str) -> BaseException | None:
        """The error of the last failed read of ``sid`` (None: none failed)."""
        return self._failed.get(sid)
