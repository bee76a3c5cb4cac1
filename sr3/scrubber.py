"""Scrubbing: a ring node re-reads its replicas to catch bit rot.

Reads catch a corrupt replica only when they touch it; :class:`Scrubber` reads
every one on a schedule. A replica that fails its checksum is quarantined and
the repair coordinator (:mod:`sr3.repair`) copies a good one back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sr3.errors import StorageError
from sr3.storage import ReplicaStore

__all__ = ["Scrubber"]

logger = logging.getLogger(__name__)


class Scrubber:
    """Re-reads every replica a node holds, once per interval, to catch bit rot.

    A replica that fails its checksum is quarantined by :meth:`ReplicaStore.verify`
    and leaves the node's index; the repair coordinator's next pass copies a good
    replica back. Reads catch corruption only in copies they happen to touch; the
    scrubber catches the rest.

    Args:
        store: The node's replica store.
        interval_s: Seconds between passes (a pass starts after the interval).
        on_quarantine: Called with the shard id of every replica quarantined.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        interval_s: float,
        on_quarantine: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._interval_s = interval_s
        self._on_quarantine = on_quarantine
        self._stop = threading.Event()

    def stop(self) -> None:
        """Make :meth:`run` return."""
        self._stop.set()

    def run(self) -> None:
        """Scrub once per interval until :meth:`stop`."""
        while not self._stop.wait(self._interval_s):
            self.scrub_once()

    def scrub_once(self) -> list[str]:
        """Verify every replica now; return the shard ids quarantined."""
        bad: list[str] = []
        for info in self._store.list():
            if self._stop.is_set():
                break
            try:
                intact = self._store.verify(info.shard_id)
            except StorageError as exc:  # deleted meanwhile, or unreadable
                logger.info("scrub skipped %s: %s", info.shard_id, exc)
                continue
            if not intact:
                bad.append(info.shard_id)
                logger.warning("scrub quarantined corrupt replica %s", info.shard_id)
                if self._on_quarantine is not None:
                    self._on_quarantine(info.shard_id)
        return bad
