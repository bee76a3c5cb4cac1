"""A lazy restore: the task processes at once, its key groups arrive as needed.

:class:`ChainLoader` holds one owner's committed chain (a base and its deltas,
as the eager restore reads it) and is the :class:`~sr3.state_blobs.KeyGroupLoader`
of a deferred :class:`~sr3.state.KeyedState`. In the background, the
planner's transfer (star, line or tree, :class:`~sr3.recovery.PlannedTransfer`)
brings the chain and hands over each key group as its last piece arrives;
whatever it left missing (or, with no transfer, the whole chain) background
threads then fetch shard by shard in key-group order. A key group the task
needs before the background brought it is fetched at once (its shards only,
in parallel), and its tuple waits for that key group alone; a key group is
installed once, from whichever path brought it whole first. Shards a
background fetch failed to read are read again on demand. When every key group
arrived, ``on_loaded`` is called once with the load's :class:`LoadStats`.
The loader's parts beside it: :mod:`backend.keygroup_arrivals` (what arrived),
:mod:`backend.shard_fetches` (which shards are queued, being read or failed) and
:mod:`backend.lazy_transfer` (the background transfer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from backend.keygroup_arrivals import KeyGroupArrivals
from backend.lazy_transfer import run_transfer
from backend.shard_fetches import ShardFetches
from sr3.codec import decode_shard
from sr3.errors import RecoveryError
from sr3.manifest import Manifest, ShardMeta
from sr3.recovery.transfer_plan import PlannedTransfer, shards_to_read
from sr3.replication import ReplicatedStore

__all__ = ["LAZY_FETCH", "ChainLoader", "LoadStats"]

logger = logging.getLogger(__name__)

Blob = bytes | memoryview
#: A restore report's ``used`` when the restore was lazy.
LAZY_FETCH: Final = "lazy"
#: Background fetch threads per restored task (a shard each at a time).
BACKGROUND_THREADS: Final = 2
#: Threads fetching the shards of a key group a tuple waits for, in parallel.
ON_DEMAND_THREADS: Final = 4


@dataclass(frozen=True)
class LoadStats:
    """How a lazy restore's shards arrived.

    Attributes:
        shards: Shards in the chain.
        bytes_read: Payload bytes received, by the transfer (merged pieces
            as sent) and shard by shard (a shard the transfer and a tuple
            both brought counts twice).
        on_demand: Shard reads on the task's thread because a tuple needed
            them before the background brought them (one key group's bytes of
            a shard, or the whole shard when it records no span).
        loaded_s: Seconds from the loader's start until every shard arrived.
        transfer: The structure the background transfer ran (star, line or
            tree; empty: none was planned, or planning failed).
        reason: What the background load did and why (the planner's words).
    """

    shards: int
    bytes_read: int
    on_demand: int
    loaded_s: float
    transfer: str = ""
    reason: str = ""


class ChainLoader:
    """Fetches one owner's committed chain, key group by key group.

    Args:
        store: The replicated store to read shards from.
        manifest: The committed epoch's manifest of the owner.
        metas: Shard records of the manifest's shards.
        on_loaded: Called once when every key group arrived (on whichever
            thread brought the last one).
        plan: Plans the transfer to run in the background first, on the
            background thread: planning (probing the holders under ``auto``)
            stays off the task's critical path (None: the background fetches
            shard by shard only).

    Raises:
        RecoveryError: a shard of the manifest has no record.
    """

    def __init__(
        self,
        store: ReplicatedStore,
        manifest: Manifest,
        metas: Mapping[str, ShardMeta],
        *,
        on_loaded: Callable[[LoadStats], None] | None = None,
        plan: Callable[[], PlannedTransfer] | None = None,
    ) -> None:
        missing = [sid for sid in manifest.shard_ids if sid not in metas]
        if missing:
            msg = (
                f"manifest {manifest.owner}@{manifest.epoch} lists shards with no "
                f"record: {missing}; the epoch was collected or never published"
            )
            raise RecoveryError(msg)
        read = {
            m.shard_id
            for m in shards_to_read([metas[sid] for sid in manifest.shard_ids])
        }
        shard_ids = [sid for sid in manifest.shard_ids if sid in read]
        self._store = store
        self._metas = {sid: metas[sid] for sid in shard_ids}
        self._on_loaded = on_loaded
        self._plan = plan
        #: a transfer runs: take_all waits for it before fetching shards
        self._transferring = plan is not None
        #: the structure the background ran and why (LoadStats)
        self._transfer_name = ""
        self._reason = "lazy restore: the background fetched shard by shard"
        #: what arrived, key group by key group (under the lock)
        self._arrivals = KeyGroupArrivals(self._metas)
        #: which shards are queued, being read or failed (under the lock)
        self._fetches = ShardFetches(self._metas)
        self._cond = threading.Condition()
        self._started = time.monotonic()
        self._bytes = 0
        self._on_demand = 0
        self._done = False
        self._demand_pool: ThreadPoolExecutor | None = None

    @property
    def key_groups(self) -> frozenset[int]:
        """Every key group the chain holds."""
        return self._arrivals.key_groups

    @property
    def bytes_total(self) -> int:
        """Payload bytes of the chain's shards."""
        return sum(meta.size for meta in self._metas.values())

    @property
    def bytes_read(self) -> int:
        """Payload bytes received so far (as :attr:`LoadStats.bytes_read` counts)."""
        with self._cond:
            return self._bytes

    @property
    def on_demand_shards(self) -> int:
        """Shards fetched on the task's thread so far (a tuple needed them)."""
        return self._on_demand

    def start(self, threads: int = BACKGROUND_THREADS) -> None:
        """Start the background fetch (daemon threads: they never hold an exit)."""
        if not self._metas:
            self._finish()
            return
        if self._plan is not None:
            threading.Thread(
                target=self._run_transfer,
                args=(self._plan, threads),
                name="sr3-lazy-transfer",
                daemon=True,
            ).start()
            return
        self._start_threads(threads)

    def _start_threads(self, threads: int) -> None:
        for n in range(max(1, threads)):
            threading.Thread(
                target=self._background, name=f"sr3-lazy-{n}", daemon=True
            ).start()

    def take(self, key_group: int) -> dict[int, list[Blob]]:
        """Return ``key_group``'s blobs (fetched now if need be) and any others arrived.

        Raises:
            RecoveryError, ShardNotFoundError: a shard of it cannot be read.
        """
        with self._cond:
            whole = self._arrivals.is_whole(key_group)
        if not whole and not self._fetch_key_group(key_group):
            try:
                self._ensure(self._arrivals.chain(key_group), demanded=True)
            except RecoveryError:
                with self._cond:  # the transfer may have brought it meanwhile
                    if not self._arrivals.is_whole(key_group):
                        raise
        with self._cond:
            return self._arrivals.hand_out()

    def _fetch_key_group(self, kg: int) -> bool:
        """Read ``kg``'s blobs alone from each shard of its chain (in parallel).

        Only the key group's bytes travel, not its shards' (a delta's shard
        holds many key groups): the first tuple of a restored task waits for
        its own state only. Shards already here give their blob. False: a
        shard records no span for it, or a read failed; the caller then
        fetches the whole shards.
        """
        chain = self._arrivals.chain(kg)
        if not chain or any(self._metas[sid].span(kg) is None for sid in chain):
            return False
        with self._cond:
            have = self._arrivals.blobs_here(kg)
        wanted = [sid for sid in chain if sid not in have]
        try:
            read = list(
                self._pool().map(
                    lambda sid: self._store.get_key_group(self._metas[sid], kg), wanted
                )
            )
        except Exception as exc:  # the whole shards are the fallback
            logger.warning(
                "lazy restore: key group %d not read alone (%s); reading its shards",
                kg,
                exc,
            )
            return False
        blobs = dict(zip(wanted, read, strict=True))
        with self._cond:
            self._on_demand += len(wanted)
            self._bytes += sum(len(blob) for blob in read)
            # unless the background brought it meanwhile; a shard it brought
            # holds kg's blob too: dropped, or its buffer would stay referenced
            self._deliver_locked(
                kg,
                [have[sid] if sid in have else blobs[sid] for sid in chain],
                drop_arrived=True,
            )
        self._maybe_finish()
        return True

    def take_all(self) -> dict[int, list[Blob]]:
        """Return every key group not handed out yet, waiting for the background.

        Raises:
            RecoveryError, ShardNotFoundError: a shard cannot be read.
        """
        with self._cond:
            while self._transferring:
                self._cond.wait()
            left = self._arrivals.shards_left()
        self._ensure(left, demanded=False)
        with self._cond:
            return self._arrivals.hand_out()

    def _run_transfer(self, plan: Callable[[], PlannedTransfer], threads: int) -> None:
        """Plan and run the transfer, then fetch what it left shard by shard."""
        outcome = run_transfer(plan, self._deliver)
        self._transfer_name = outcome.transfer
        self._reason = outcome.reason
        received = outcome.bytes_received
        with self._cond:
            self._transferring = False
            self._bytes += received
            left = self._arrivals.shards_left()
            self._fetches.queue(left)
            self._cond.notify_all()
        if left:
            self._start_threads(threads)
        else:
            self._maybe_finish()

    def _deliver(self, kg: int, blobs: list[Blob]) -> None:
        """Take a key group the transfer brought whole (unless it is already here)."""
        with self._cond:
            self._deliver_locked(kg, blobs)
        self._maybe_finish()

    def _deliver_locked(
        self, kg: int, blobs: list[Blob], *, drop_arrived: bool = False
    ) -> None:
        """Take ``kg`` whole from ``blobs`` unless it already is (under the lock)."""
        if self._arrivals.deliver(kg, blobs, drop_arrived=drop_arrived):
            self._cond.notify_all()

    def _ensure(self, sids: list[str], *, demanded: bool) -> None:
        """Make sure ``sids`` arrived: fetch those nobody fetches, wait for the rest.

        The shards nobody fetches yet are fetched here, in parallel; a shard
        whose background fetch failed is read again here once. ``demanded``: a
        tuple needs them (counted in ``on_demand_shards``), rather than a
        snapshot needing the whole state.

        Raises:
            RecoveryError: a shard could not be read.
        """
        for attempt in (1, 2):
            with self._cond:
                claimed = self._fetches.claim(
                    s for s in sids if not self._arrivals.has_shard(s)
                )
            if demanded and attempt == 1:
                self._on_demand += len(claimed)
            if len(claimed) > 1:
                list(self._pool().map(self._fetch, claimed))
            elif claimed:
                self._fetch(claimed[0])
            with self._cond:
                while self._fetches.any_busy(sids):
                    self._cond.wait()
                missing = [s for s in sids if not self._arrivals.has_shard(s)]
            if not missing:
                return
        sid = missing[0]
        meta = self._metas[sid]
        error = self._fetches.failure(sid)
        msg = f"shard {sid} of {meta.owner}@{meta.epoch} could not be read: {error}"
        raise RecoveryError(msg) from error

    def _pool(self) -> ThreadPoolExecutor:
        if self._demand_pool is None:
            self._demand_pool = ThreadPoolExecutor(
                ON_DEMAND_THREADS, thread_name_prefix="sr3-lazy-demand"
            )
        return self._demand_pool

    def _background(self) -> None:
        while True:
            with self._cond:
                sid = self._fetches.next_queued(skip=self._arrivals.has_shard)
            if sid is None:
                return
            self._fetch(sid)

    def _fetch(self, sid: str) -> None:
        """Read ``sid`` and record it (its failure too); the caller marked it busy."""
        meta = self._metas[sid]
        try:
            data, _ = self._store.get(meta)
            shard = decode_shard(data, shard_id=sid, verified=True)
        except Exception as exc:  # recorded: the task's thread raises it on demand
            logger.warning("lazy restore: shard %s not read yet: %s", sid, exc)
            with self._cond:
                self._fetches.fail(sid, exc)
                self._cond.notify_all()
            return
        with self._cond:
            self._fetches.done(sid)
            self._arrivals.add_shard(sid, shard.key_groups, meta.key_groups)
            self._bytes += meta.size
            self._cond.notify_all()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Call ``on_loaded`` once, when every key group is complete.

        Not while the transfer runs: its bytes are counted when it returns.
        """
        with self._cond:
            done = (
                self._arrivals.all_whole() and not self._transferring and not self._done
            )
            if done:
                self._done = True
        if done:
            self._finish()

    def _finish(self) -> None:
        stats = LoadStats(
            shards=len(self._metas),
            bytes_read=self._bytes,
            on_demand=self._on_demand,
            loaded_s=time.monotonic() - self._started,
            transfer=self._transfer_name,
            reason=self._reason,
        )
        if self._on_loaded is not None:
            self._on_loaded(stats)
